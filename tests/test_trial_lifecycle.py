"""How a real trial process ends, as the Pushgateway sees it: SIGTERM, an uncaught exception;
`trainwatch gc` clearing what they leave; a resolver that never answers.

Issue 11's probes: SIGTERM, SIGKILL, an exception or sys.exit(1) left the group with nothing to
say why; two processes with the same key shared one group and the first clean exit deleted the
other's live group.
"""

from __future__ import annotations

import signal
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from benchmarks.stack import REPO, Service, wait_until
from tests.trial_support import pushed, pushed_value
from trainwatch import gc
from trial_instrumentation import names

# A training loop that runs until stopped; {setup} and {end} are filled in per test.
SCRIPT = """
import signal, sys, time
import trial_instrumentation as ti
{setup}
with ti.Trial(experiment="life", trial=sys.argv[2], rank=0, pushgateway=sys.argv[1],
              push_interval=0.2, exit_timeout=5) as trial:
    print("started", flush=True)
    for batch in trial.loader(range(10**9)):
        with trial.phase("train_batch"):
            time.sleep(0.001)
        {end}
"""


def start(pgw: Service, trial: str, setup: str = "", end: str = "pass") -> subprocess.Popen[str]:
    code = textwrap.dedent(SCRIPT).format(setup=setup, end=end)
    proc = subprocess.Popen([sys.executable, "-c", code, pgw.url, trial], cwd=REPO,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    wait_until(lambda: pushed_value(pgw, "trainwatch_trial_steps_total", trial=trial),
               what=f"trial {trial}'s first push with steps")
    return proc


def exit_marker(pgw: Service, trial: str) -> str | None:
    found = [dict(labels)["reason"] for (name, labels), _ in pushed(pgw).items()
             if name == names.EXIT and dict(labels).get("trial") == trial]
    return found[0] if found else None


def janitor_clears(pgw: Service, trial: str) -> None:
    gateway = gc.Pushgateway(pgw.url, 5, {})
    wait_until(lambda: gc.collect(gateway, names.JOB, 1.0, dry_run=True),
               what="the group to age past the janitor's 1 s")
    removed = gc.collect(gateway, names.JOB, 1.0, dry_run=False)
    assert [g.labels["trial"] for g in removed] == [trial]
    wait_until(lambda: pushed(pgw) == {}, timeout=5, what="the janitor's delete (202)")


def test_sigterm_pushes_terminated_then_dies_of_the_signal(pushgateway: Service) -> None:
    proc = start(pushgateway, "evicted")
    proc.send_signal(signal.SIGTERM)
    assert proc.wait(timeout=20) == -signal.SIGTERM  # the default action, as without trainwatch
    assert exit_marker(pushgateway, "evicted") == names.EXIT_TERMINATED
    janitor_clears(pushgateway, "evicted")


def test_sigterm_runs_the_users_own_handler_after_the_push(pushgateway: Service) -> None:
    setup = ("def checkpoint(signum, frame):\n"
             "    print('user handler', flush=True)\n"
             "    sys.exit(7)\n"
             "signal.signal(signal.SIGTERM, checkpoint)")
    proc = start(pushgateway, "own-handler", setup=setup)
    proc.send_signal(signal.SIGTERM)
    out, _ = proc.communicate(timeout=20)
    assert proc.returncode == 7
    assert "user handler" in out
    assert exit_marker(pushgateway, "own-handler") == names.EXIT_TERMINATED


def test_an_uncaught_exception_pushes_failed(pushgateway: Service) -> None:
    proc = start(pushgateway, "crashed", end="raise RuntimeError('boom')")
    _, err = proc.communicate(timeout=20)
    assert proc.returncode == 1
    assert "RuntimeError: boom" in err  # the user's traceback is still printed
    assert exit_marker(pushgateway, "crashed") == names.EXIT_FAILED
    janitor_clears(pushgateway, "crashed")


RESOLVER_STALL = """
import socket, time
from trial_instrumentation.transport import request
silent = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
silent.bind(("127.0.0.1", 53))  # a DNS server that receives every query and never answers
start = time.monotonic()
try:
    request("http://pushgateway.example:9091/metrics/job/x", "PUT", 0.5, 1.0, (), b"")
except TimeoutError as err:
    print(f"{time.monotonic() - start:.2f} {err}")
"""


def test_a_clean_exit_never_deletes_the_group_another_process_still_pushes_to(
        pushgateway: Service) -> None:
    first = start(pushgateway, "shared", end="if batch >= 20: break")
    second = start(pushgateway, "shared")
    try:
        assert first.wait(timeout=30) == 0
        # The first process's clean exit deleted nothing: the group is there, and the second
        # process's pushes go on landing in it.
        # (Its step counter is there, whichever process pushed last: the second one's first
        # pushes, before it has finished a step, say 0.)
        assert pushed_value(pushgateway, "trainwatch_trial_steps_total",
                            trial="shared") is not None
        wait_until(lambda: pushed_value(pushgateway, names.TRIAL_INFO, trial="shared",
                                        pid=str(second.pid)) == 1,
                   what="the second process's push after the first one's clean exit")
        assert exit_marker(pushgateway, "shared") is None  # the live writer's push, unmarked
    finally:
        second.kill()
        second.wait()


def test_a_resolver_that_never_answers_costs_the_connect_timeout(tmp_path: Path) -> None:
    # The real system resolver, pointed (in private network and mount namespaces: nothing
    # outside this process tree is touched) at a loopback DNS server that never answers.
    # Unbounded, glibc gives up after its own 2 x 5 s.
    resolv = tmp_path / "resolv.conf"
    resolv.write_text("nameserver 127.0.0.1\noptions timeout:5 attempts:2\n")
    script = (f"ip link set lo up && mount --bind {resolv} /etc/resolv.conf && "
              f"exec {sys.executable} -c '{RESOLVER_STALL}'")
    if subprocess.run(["unshare", "--net", "--mount", "true"], capture_output=True,
                      check=False).returncode != 0:
        pytest.skip("unshare --net --mount is not permitted here (needs CAP_SYS_ADMIN)")
    proc = subprocess.run(["unshare", "--net", "--mount", "sh", "-c", script], cwd=REPO,
                          capture_output=True, text=True, timeout=60, check=False,
                          env={"PYTHONPATH": str(REPO), "PATH": "/usr/sbin:/usr/bin:/sbin:/bin"})
    assert proc.returncode == 0, proc.stderr
    seconds, message = proc.stdout.split(" ", 1)
    assert message.strip() == "resolving 'pushgateway.example' took longer than 0.5s"
    # The connect timeout waited out, not cut short (a wrong unit) nor drawn out to glibc's.
    assert 0.5 <= float(seconds) < 1.5
