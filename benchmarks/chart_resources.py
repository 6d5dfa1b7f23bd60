"""What each service of the stack uses under a realistic load: the chart's default requests and
limits come from this run.

Starts `trainwatch stack up` (the real exporter, host collector; Prometheus with the rules,
Pushgateway, Alertmanager) in a temp state dir on free ports, pushes ``--groups`` trial groups
(each a real Trial's metric families: 7 phase histograms, step histogram, counters, info) every
``--interval`` seconds for ``--seconds``, scrapes at 1 s, then prints each process's peak RSS
(VmHWM) and its CPU use over the run.

    .venv/bin/python -m benchmarks.chart_resources [--groups 64] [--seconds 90]
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from benchmarks.http_load import proc_status
from benchmarks.stack import free_port
from trainwatch.layout import StateDir
from trainwatch.procs import ProcRecord
from trainwatch.stack.settings import DEFAULT_PORTS

REPO = Path(__file__).resolve().parent.parent
TICKS = os.sysconf("SC_CLK_TCK")


def cpu_seconds(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / TICKS  # utime + stime


def trials(pushgateway: str, groups: int) -> list[object]:
    import trial_instrumentation as ti

    started = []
    for index in range(groups):
        trial = ti.Trial(experiment="bench", trial=f"t{index // 8}", rank=index % 8, world_size=8,
                         pushgateway=pushgateway, push_interval=5).start()
        for _ in trial.loader(range(20)):
            with trial.phase("train_batch"), trial.phase("to_device"):
                pass
        started.append(trial)
    return started


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--groups", type=int, default=64)
    parser.add_argument("--seconds", type=float, default=90)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        state = StateDir.resolve(tmp)
        ports = [f"--{name}-port={free_port()}" for name in DEFAULT_PORTS]
        env = {**os.environ, "PYTHONPATH": str(REPO)}
        cli = [sys.executable, "-m", "trainwatch.cli", "stack"]
        subprocess.run([*cli, "up", "--state-dir", tmp, *ports, "--scrape-interval", "1s"],
                       check=True, env=env, stdout=subprocess.DEVNULL)
        try:
            pids = {}
            for name in DEFAULT_PORTS:
                path = state.pid_file(name)
                if path.exists():
                    pids[name] = ProcRecord.load(path).pid
            pgw_port = next(p.split("=")[1] for p in ports if p.startswith("--pushgateway"))
            started = trials(f"http://127.0.0.1:{pgw_port}", args.groups)
            before = {name: cpu_seconds(pid) for name, pid in pids.items()}
            start = time.monotonic()
            time.sleep(args.seconds)  # the measurement window, not synchronisation
            elapsed = time.monotonic() - start
            print(f"{args.groups} trial groups pushed every 5 s, scraped every 1 s, "
                  f"{elapsed:.0f} s:")
            for name, pid in pids.items():
                cores = (cpu_seconds(pid) - before[name]) / elapsed
                print(f"  {name:13s} peak RSS {proc_status(pid, 'VmHWM') / 1024:6.1f} MiB  "
                      f"CPU {cores * 1000:6.1f} millicores")
            for trial in started:
                trial.close()  # type: ignore[attr-defined]
        finally:
            subprocess.run([*cli, "down", "--state-dir", tmp], check=False, env=env,
                           stdout=subprocess.DEVNULL)


if __name__ == "__main__":
    main()
