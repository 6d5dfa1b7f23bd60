"""``make gpu-check``: every GPU-only test and benchmark in one command, one table of figures
against their targets (issue 36).

    .venv/bin/python -m benchmarks.gpu_check [--out DIR] [--only STEP ...]

Steps, each a process of its own under a 9-minute limit (one device command may run 10):

- ``tests``: every test file that carries ``pytest.mark.gpu``, with ``-m gpu`` (real NVML
  against the fake NVML's contract, GPM activity under a matmul load, memory v2, the peak FLOPs
  table for the real board, a bf16 loop's MFU, the ``cuda_events`` timing modes, the process
  collector, the profiler's GPU split): one row per test, a skip with its reason.
- ``scrape``: ``exporter_scrape.py --real-gpu``: trainwatch-exporter over the real NVML beside
  ``nvidia-smi --query-gpu``.
- ``cuda_events``: the timing modes' cost on a launch-bound and a GPU-bound loop.
- ``profile``: what an on-demand profiler trace says of the same two loops.
- ``auto``: an unmodified CUDA loop under ``TRAINWATCH_AUTO`` (``auto_gpu_check.py``): its
  steps, samples and GPU counted with no line of trainwatch in it.

Without an NVIDIA driver the CPU-side parts still run (``cuda_events``' hot path, the
profile of a CPU MLP) and every GPU step or test is a row that says why it was skipped. A
benchmark or test reports a figure with ``figure()`` (a ``GPUCHECK {json}`` line on stdout);
the target and the verdict are the producer's, this runner only gathers them. Exit 1 when a
test fails, a figure misses its target or a step fails; each step's whole output is kept in
``--out`` (default ``.gpu-check/``).
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import time
import xml.etree.ElementTree as ET
from dataclasses import dataclass
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
MARK = "GPUCHECK "
STEP_SECONDS = 540  # under the 10 minutes one command may run on a lent GPU machine


def figure(name: str, value: float | str, target: str, ok: bool | None) -> None:
    """Report one figure to the runner (and to a person reading the output): ``ok`` None for
    a figure with no target."""
    print(MARK + json.dumps({"name": name, "value": value, "target": target, "ok": ok}),
          flush=True)


@dataclass
class Row:
    step: str
    name: str
    value: str
    target: str
    verdict: str  # ok, FAIL, skipped: why, -

    @property
    def failed(self) -> bool:
        return self.verdict in ("FAIL", "error")


def gpu_test_files() -> list[str]:
    """The test files that mark a test ``gpu``: the marker is the one list."""
    return sorted(str(p.relative_to(REPO)) for p in (REPO / "tests").glob("test_*.py")
                  if "pytest.mark.gpu" in p.read_text(encoding="utf-8"))


def _fmt(value: object) -> str:
    return f"{value:.4g}" if isinstance(value, float) else str(value)


def figures(step: str, output: str) -> list[Row]:
    rows = []
    for line in output.splitlines():
        if (at := line.find(MARK)) < 0:  # pytest -s writes its dots before a test's output
            continue
        try:
            f = json.loads(line[at + len(MARK):])
            verdict = "-" if f["ok"] is None else "ok" if f["ok"] else "FAIL"
            rows.append(Row(step, str(f["name"]), _fmt(f["value"]), str(f["target"]), verdict))
        except (ValueError, KeyError, TypeError):
            rows.append(Row(step, "unreadable figure line", line[:80], "", "error"))
    return rows


def junit_rows(path: Path) -> list[Row]:
    """One row per test case of a pytest junit XML file."""
    rows = []
    for case in ET.parse(path).getroot().iter("testcase"):
        name = f"{case.get('classname', '').rsplit('.', 1)[-1]}::{case.get('name')}"
        took = f"{float(case.get('time') or 0):.1f} s"
        skipped = case.find("skipped")
        if case.find("failure") is not None or case.find("error") is not None:
            verdict = "FAIL"
        elif skipped is not None:
            verdict = "skipped: " + (skipped.get("message") or "").removeprefix("Skipped: ")
        else:
            verdict = "ok"
        rows.append(Row("tests", name, took, "passes", verdict))
    return rows


@dataclass
class Step:
    name: str
    args: list[str]
    needs: str | None = None  # a program the step cannot run without
    env: dict[str, str] | None = None  # set for the step; "PYTHONPATH" goes before the repo


def steps(out: Path) -> list[Step]:
    py = sys.executable
    return [
        Step("tests", [py, "-m", "pytest", "-m", "gpu", "-s", "-q", "-p", "no:cacheprovider",
                       "-o", "addopts=", f"--junitxml={out / 'tests.xml'}",
                       *gpu_test_files()]),
        Step("scrape", [py, "-m", "benchmarks.exporter_scrape", "--real-gpu", "--rounds", "200",
                        "--warmup", "20"], needs="nvidia-smi"),
        Step("cuda_events", [py, "-m", "benchmarks.cuda_events", "--rounds", "15",
                             "--steps", "200"]),
        Step("profile", [py, "-m", "benchmarks.profile_summary"]),
        # An unmodified CUDA loop under automatic instrumentation, as `trainwatch run` starts
        # it (benchmarks/auto_gpu_check.py).
        Step("auto", [py, "-m", "benchmarks.auto_gpu_check"], env={
            "TRAINWATCH_AUTO": "1", "TRAINWATCH_PULL_PORT": "0",
            "TRAINWATCH_EXPERIMENT": "gpu-check", "TRAINWATCH_TRIAL": "auto",
            "PYTHONPATH": str(REPO / "trial_instrumentation" / "auto" / "site")}),
    ]


def run_step(step: Step, out: Path) -> list[Row]:
    if step.needs and shutil.which(step.needs) is None:
        return [Row(step.name, "-", "-", "-", f"skipped: no {step.needs} on PATH (no NVIDIA "
                    "driver)")]
    own = dict(step.env or {})
    env = {**os.environ, **own, "PYTHONPATH": os.pathsep.join(
        p for p in (own.get("PYTHONPATH"), str(REPO), os.environ.get("PYTHONPATH")) if p),
        "PYTHONUNBUFFERED": "1"}
    start = time.monotonic()
    try:
        done = subprocess.run(step.args, check=False, cwd=REPO, env=env, capture_output=True,
                              text=True, timeout=STEP_SECONDS)
        output, code = done.stdout + done.stderr, done.returncode
    except subprocess.TimeoutExpired as e:
        output = (e.stdout or b"").decode() if isinstance(e.stdout, bytes) else (e.stdout or "")
        code = None
    (out / f"{step.name}.log").write_text(output, encoding="utf-8")
    rows = figures(step.name, output)
    if step.name == "tests" and (out / "tests.xml").exists():
        rows = junit_rows(out / "tests.xml") + rows
    took = f"{time.monotonic() - start:.0f} s"
    if code is None:
        rows.append(Row(step.name, "step", took, f"<= {STEP_SECONDS} s", "FAIL"))
    elif code != 0:
        rows.append(Row(step.name, "step", f"exit {code}", "exit 0", "FAIL"))
    else:
        rows.append(Row(step.name, "step", took, "exit 0", "ok"))
    return rows


def table(rows: list[Row]) -> str:
    head = Row("step", "what", "value", "target", "verdict")
    cells = [head, *rows]
    widths = [max(len(getattr(r, f)) for r in cells) for f in ("step", "name", "value", "target")]
    return "\n".join(f"{r.step:<{widths[0]}}  {r.name:<{widths[1]}}  {r.value:>{widths[2]}}  "
                     f"{r.target:<{widths[3]}}  {r.verdict}" for r in cells)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=REPO / ".gpu-check",
                        help="where each step's output is kept (default .gpu-check/)")
    parser.add_argument("--only", nargs="+", metavar="STEP",
                        help="run these steps only: " + ", ".join(s.name for s in steps(Path())))
    args = parser.parse_args(argv)
    args.out.mkdir(parents=True, exist_ok=True)
    chosen = [s for s in steps(args.out) if not args.only or s.name in args.only]
    if args.only and len(chosen) != len(set(args.only)):
        parser.error(f"--only: unknown step among {args.only}")
    rows: list[Row] = []
    for step in chosen:
        print(f"gpu-check: {step.name} ...", file=sys.stderr, flush=True)
        rows += run_step(step, args.out)
    text = table(rows)
    (args.out / "table.txt").write_text(text + "\n", encoding="utf-8")
    print(text)
    failed = [r for r in rows if r.failed]
    print(f"\n{len(rows)} rows, {len(failed)} failed; each step's output in {args.out}/")
    return 1 if failed else 0


if __name__ == "__main__":
    raise SystemExit(main())
