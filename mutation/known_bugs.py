"""Issue 16's hand-made bugs, each applied to a scratch copy of the tree: the tests named for it
must fail. These are the realistic bugs cosmic-ray does not generate (a regex narrowed, a mode
dropped from a tuple, a label dropped from generated PromQL, a cache key changed).

    python -m mutation.known_bugs            # all; exit 1 if any bug passes its tests
    python -m mutation.known_bugs verdict    # those whose name contains "verdict"
"""

from __future__ import annotations

import subprocess
import sys
import tempfile
from pathlib import Path

from mutation.run import copy_tree

REPO = Path(__file__).resolve().parent.parent

# (name, file, original text, buggy text, pytest arguments)
BUGS = [
    ("cpu iowait dropped", "exporter/host.py", '"idle", "iowait", "irq"', '"idle", "irq"',
     ["tests/test_exporter_host.py", "-k", "kernel_mode"]),
    ("disk xvd partitions counted", "exporter/host.py", "(h|s|v|xv)d[a-z]", "[hsv]d[a-z]",
     ["tests/test_exporter_host.py", "-k", "whole_disk"]),
    ("nested phase gets the outermost start", "trial_instrumentation/timing.py",
     "self._outer.pop() if", "self._outer.pop(0) if", ["tests/test_trial_timing.py"]),
    ("HTTP 400 retried", "trial_instrumentation/transport.py", "not 400 <= self.status",
     "not 400 < self.status", ["tests/test_trial_failures.py", "-k", "rejected or retrying"]),
    ("phase share summed over ranks", "prometheus/rules/recording.yml",
     ("/ on (experiment, trial, rank) group_left\n      sum by (experiment, trial, rank) "
     "(rate(trainwatch_trial_step_seconds_sum"),
     ("/ on (experiment, trial) group_left\n      sum by (experiment, trial) "
     "(rate(trainwatch_trial_step_seconds_sum"), ["tests/test_rules.py", "-k", "promtool_test"]),
    ("verdict checks copies after CPU", "trainwatch/contract/checks.py",
     ('    ("memory_copies", "Host↔device copies", HOST_TO_DEVICE_BOUND, "host_to_device_share", '
     'True),\n    ("busy_cpu", "Node CPUs saturated", CPU_SATURATED, "node_cpu", True),'),
     ('    ("busy_cpu", "Node CPUs saturated", CPU_SATURATED, "node_cpu", True),\n'
     '    ("memory_copies", "Host↔device copies", HOST_TO_DEVICE_BOUND, "host_to_device_share", '
     'True),'), ["tests/test_diagnose.py", "-k", "verdict_table"]),
    ("exit code of the best rank", "trainwatch/diagnose/verdict.py",
     "return max((v.exit_code", "return min((v.exit_code",
     ["tests/test_diagnose.py", "-k", "worst_ranks"]),
    ("network receive and transmit swapped", "exporter/host.py",
     "(device,), float(io.bytes_recv)", "(device,), float(io.bytes_sent)",
     ["tests/test_exporter_host.py", "-k", "network_counters_per_device"]),
    ("password cache keyed on the user alone", "exporter/webauth.py",
     'len(name).to_bytes(4, "big") + name + password,', 'len(name).to_bytes(4, "big") + name,',
     ["tests/test_exporter_webauth.py", "-k", "remembered"]),
]


def main(selected: list[str]) -> int:
    missed = 0
    with tempfile.TemporaryDirectory(prefix="trainwatch-bugs-") as scratch:
        work = Path(scratch)
        copy_tree(work)
        for name, path, right, wrong, tests in BUGS:
            if selected and not any(s in name for s in selected):
                continue
            target = work / path
            text = target.read_text()
            if text.count(right) != 1:
                print(f"STALE: {name}: {path} no longer has the text to break")
                missed += 1
                continue
            target.write_text(text.replace(right, wrong))
            try:
                done = subprocess.run([sys.executable, "-m", "pytest", "-q", "-x",
                                       "-p", "no:cacheprovider", *tests], cwd=work,
                                      capture_output=True, text=True, check=False)
            finally:
                target.write_text(text)
            caught = done.returncode == 1
            missed += not caught
            last = (done.stdout.strip().splitlines() or ["(no output)"])[-1]
            print(f"{'caught' if caught else 'MISSED'}: {name}: {last}", flush=True)
    return 1 if missed else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
