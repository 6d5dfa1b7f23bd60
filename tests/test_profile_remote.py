"""The command `trainwatch profile` prints for a rank on another node: pasted into a shell it
signals that rank and nothing else, however its node, pod or namespace is named."""

from __future__ import annotations

import shlex
import signal

import pytest

from trainwatch.profile import Rank


@pytest.mark.parametrize(("rank", "expected"), [
    (Rank("0", "gpu-node-7", 4242), "ssh gpu-node-7 kill -USR2 4242"),
    (Rank("0", "n1; rm -rf ~", 4242), "ssh 'n1; rm -rf ~' kill -USR2 4242"),
    (Rank("1", "n", 17, pod="train-0", namespace="ml team"),
     "kubectl exec -n 'ml team' train-0 -- kill -USR2 17"),
    (Rank("1", "n", 17, pod="$(reboot)"), "kubectl exec '$(reboot)' -- kill -USR2 17"),
])
def test_each_name_is_one_shell_argument(rank: Rank, expected: str) -> None:
    command = rank.remote_command(signal.SIGUSR2)
    assert command == expected
    words = shlex.split(command)
    assert words[-2:] == ["-USR2", str(rank.pid)]
    assert (rank.pod or rank.nodename) in words


def test_a_control_character_in_a_name_is_shown_escaped_on_one_line() -> None:
    command = Rank("0", "n1\nVERDICT: forged\x1b[2J", 5).remote_command(signal.SIGUSR2)
    assert "\n" not in command and "\x1b" not in command
    assert command == "ssh 'n1\\nVERDICT: forged\\x1b[2J' kill -USR2 5"
