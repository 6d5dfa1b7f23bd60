"""On-demand profiler traces (issue 27) from real PyTorch CPU loops: a signal (chained to the
user's own handler) and the trigger file in a training process; a second request refused; a
capture cut by the trial's end or the size cap still written; an unwritable directory; and the
step path with no request (no allocation, no measurable cost)."""

from __future__ import annotations

import gzip
import json
import logging
import os
import signal
import subprocess
import sys
import textwrap
import time
import tracemalloc
from pathlib import Path
from typing import Any

import pytest

import trial_instrumentation as ti
from benchmarks.stack import REPO, Service, wait_until
from tests.trial_support import pushed
from trial_instrumentation import names
from trial_instrumentation.loader import Progress, TimedLoader
from trial_instrumentation.profiling import NEVER, OnDemandProfiler
from trial_instrumentation.timing import Histogram
from trial_instrumentation.trace_split import KINDS

LOOP = """
import logging, signal, sys, time
from pathlib import Path
import torch
import trial_instrumentation as ti
logging.basicConfig(level=logging.INFO)
signal.signal(signal.SIGUSR2, lambda *_: print("user handler ran", flush=True))
model = torch.nn.Sequential(torch.nn.Linear(32, 64), torch.nn.ReLU(), torch.nn.Linear(64, 4))
stop = Path(sys.argv[2])
with ti.Trial(experiment="prof", trial="loop", pushgateway=sys.argv[1], push_interval=0.2) as trial:
    for batch in trial.loader(iter(lambda: torch.randn(8, 32), None)):
        model(batch).sum().backward()
        time.sleep(0.002)
        if stop.exists():
            break
"""


def profile_series(pgw: Service) -> dict[str, Any]:
    """Each profile series' value (the info's path), keyed by name or name{op} or
    name{device/kind}."""
    found: dict[str, Any] = {}
    for (name, labels), value in pushed(pgw).items():
        if name.startswith("trainwatch_trial_profile_"):
            label = dict(labels)
            key = (f"{name}{{{label['op']}}}" if "op" in label else
                   f"{name}{{{label['device']}/{label['kind']}}}" if "kind" in label else name)
            found[key] = label.get("path") if name == names.PROFILE_INFO else value
    return found


def split_of(series: dict[str, Any], device: str = "cpu") -> dict[str, float]:
    return {kind: series[f"{names.PROFILE_TIME_SECONDS}{{{device}/{kind}}}"]
            for kind in KINDS}


def trace_of(path: str | Path) -> dict[str, Any]:
    with gzip.open(path, "rt") as file:
        trace: dict[str, Any] = json.load(file)
    return trace


def profiler_steps(trace: dict[str, Any]) -> list[str]:
    return sorted({e["name"] for e in trace["traceEvents"]
                   if str(e.get("name", "")).startswith("ProfilerStep#")})


def test_a_signal_and_the_trigger_file_capture_a_running_loop(
        pushgateway: Service, tmp_path: Path) -> None:
    trigger, stop = tmp_path / "trigger", tmp_path / "stop"
    env = {**os.environ, names.ENV_PROFILE_DIR: str(tmp_path / "traces"),
           names.ENV_PROFILE_TRIGGER: str(trigger), names.ENV_PROFILE_STEPS: "3"}
    proc = subprocess.Popen([sys.executable, "-c", textwrap.dedent(LOOP), pushgateway.url,
                             str(stop)], cwd=REPO, env=env, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)
    try:
        wait_until(lambda: pushed(pushgateway), timeout=120, what="the trial's first push")
        proc.send_signal(signal.SIGUSR2)
        first = wait_until(lambda: profile_series(pushgateway).get(names.PROFILE_INFO),
                           timeout=120, what="the signal's trace pushed")
        series = profile_series(pushgateway)
        assert series[names.PROFILE_STEPS] == 3
        assert series[names.PROFILE_SELF_SECONDS] > 0
        assert any(key.startswith(f"{names.PROFILE_OP_SELF_SECONDS}{{aten::") for key in series)
        assert names.PROFILE_KERNELS_PER_STEP not in series  # CPU only: no made-up kernels
        trace = trace_of(first)
        assert len(profiler_steps(trace)) == 3
        assert {"aten::addmm", "aten::mm"} & {e.get("name") for e in trace["traceEvents"]}
        # The split of the file's own steps, in CPU time: each step sleeps 2 ms outside any
        # operator (idle), runs the model's operators (compute) and no collective.
        split = split_of(series)
        steps = [(e["ts"], e["ts"] + e["dur"]) for e in trace["traceEvents"]
                 if str(e.get("name")).startswith("ProfilerStep#")]
        span = (max(end for _, end in steps) - min(start for start, _ in steps)) * 1e-6
        assert sum(split.values()) == pytest.approx(span / 3, rel=1e-6)
        assert split["idle"] > 0.002 and split["compute"] > 0 and split["communication"] == 0
        assert series[names.PROFILE_END_TIME] == pytest.approx(time.time(), abs=120)
        trigger.write_text("2")
        second = wait_until(lambda: (p := profile_series(pushgateway).get(names.PROFILE_INFO))
                            != first and p, timeout=60, what="the trigger file's trace pushed")
        assert len(profiler_steps(trace_of(second))) == 2
        assert profile_series(pushgateway)[names.PROFILE_STEPS] == 2
        stop.touch()
        out, err = proc.communicate(timeout=60)
    finally:
        proc.kill()
    assert proc.returncode == 0, err
    assert out.count("user handler ran") == 1  # chained: the user's SIGUSR2 handler still runs
    assert "asked by signal SIGUSR2" in err and "asked by trigger file" in err


def model_step() -> Any:
    torch = pytest.importorskip("torch")
    model = torch.nn.Linear(16, 4)
    return lambda: model(torch.randn(4, 16)).sum().backward()


def test_a_second_request_is_refused_and_the_trials_end_writes_the_capture(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture) -> None:
    step = model_step()
    monkeypatch.setenv(names.ENV_PROFILE_DIR, str(tmp_path))
    trial = ti.Trial(experiment="prof", trial="ends", pull_port=0)
    with caplog.at_level(logging.INFO, "trial_instrumentation"):
        for index in trial.loader(range(5)):
            if index in (0, 2):  # the second one arrives while the first capture runs
                trial.profile(3)
            step()
        trial.close()  # the loop ended 1 step short: the capture is written with 2 of 3
    refused = [r for r in caplog.records if "refused" in r.getMessage()]
    assert len(refused) == 1, caplog.text
    assert "2 of 3 steps recorded" in caplog.text
    (path,) = tmp_path.glob("prof/ends/rank0-*.pt.trace.json.gz")
    # The trial's own step numbers; #6 is the open part-step from step 5's end to the close.
    assert profiler_steps(trace_of(path)) == [f"ProfilerStep#{k}" for k in (4, 5, 6)]
    assert trial.registry.get_sample_value(names.PROFILE_STEPS, trial.config.grouping_key) == 2


def test_a_ddp_loops_collectives_are_its_communication(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A real Gloo process group of one rank: DDP still all-reduces its gradients every step,
    and the split counts those collectives' CPU time as communication."""
    torch = pytest.importorskip("torch")
    dist = pytest.importorskip("torch.distributed")
    monkeypatch.setenv(names.ENV_PROFILE_DIR, str(tmp_path))
    dist.init_process_group("gloo", store=dist.FileStore(str(tmp_path / "store"), 1), rank=0,
                            world_size=1)
    try:
        model = torch.nn.parallel.DistributedDataParallel(torch.nn.Linear(16, 4))
        trial = ti.Trial(experiment="prof", trial="ddp", pull_port=0)
        trial.profile(2)
        for _ in trial.loader(range(5)):
            model(torch.randn(4, 16)).sum().backward()
        trial.close()
    finally:
        dist.destroy_process_group()
    (path,) = tmp_path.glob("prof/ddp/*.gz")
    assert "c10d::allreduce_" in {e.get("name") for e in trace_of(path)["traceEvents"]}
    split = {kind: trial.registry.get_sample_value(
        names.PROFILE_TIME_SECONDS, {**trial.config.grouping_key, "device": "cpu", "kind": kind})
        for kind in KINDS}
    assert split["communication"] > 0 and split["compute"] > 0, split


def test_a_trace_over_the_size_cap_is_cut_and_says_so(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture) -> None:
    step = model_step()
    monkeypatch.setenv(names.ENV_PROFILE_DIR, str(tmp_path))
    monkeypatch.setenv(names.ENV_PROFILE_MAX_MB, "0.001")  # 1,048 bytes
    trial = ti.Trial(experiment="prof", trial="cap", pull_port=0)
    trial.profile(3)
    for _ in trial.loader(range(6)):
        step()
    trial.close()
    (path,) = tmp_path.glob("prof/cap/*.gz")
    assert path.stat().st_size <= 1048
    trace = trace_of(path)  # still valid JSON
    assert trace["trainwatch"]["cut"] is True
    assert trace["trainwatch"]["kept_events"] < trace["trainwatch"]["events"]
    assert "cut to 1048 bytes" in caplog.text


def test_an_unwritable_directory_warns_once_and_training_goes_on(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture) -> None:
    (tmp_path / "a-file").touch()
    monkeypatch.setenv(names.ENV_PROFILE_DIR, str(tmp_path / "a-file" / "traces"))
    trial = ti.Trial(experiment="prof", trial="ro", pull_port=0)
    trial.profile()
    steps = sum(1 for _ in trial.loader(range(10)))
    trial.close()
    warnings = [r for r in caplog.records if r.levelno >= logging.WARNING]
    assert steps == 10 and len(warnings) == 1, caplog.text
    assert "cannot write" in warnings[0].getMessage()
    assert trial.registry.get_sample_value("trainwatch_trial_steps_total",
                                           trial.config.grouping_key) == 10


def test_the_loaders_step_path_without_a_request_allocates_nothing_and_makes_no_call_of_its_own() -> None:
    trial = ti.Trial(experiment="prof", trial="idle", pull_port=0)
    assert isinstance(trial._profiler, OnDemandProfiler)
    loader = trial.loader(range(20_000), samples=1)
    plain = TimedLoader(range(20_000), Histogram(ti.DEFAULT_BUCKETS),
                        Histogram(ti.DEFAULT_BUCKETS), Progress(), 1, None, NEVER)
    for _ in loader:  # warm
        pass
    tracemalloc.start()
    before = tracemalloc.get_traced_memory()[0]
    for _ in loader:
        pass
    grown = tracemalloc.get_traced_memory()[0] - before
    tracemalloc.stop()
    assert grown < 4096, grown  # a per-step allocation would be ~20_000 x 28+ bytes
    # What it costs, counted rather than timed (a timing is noise on a loaded machine): the
    # Python and C calls of 20,000 steps, against the loader that can never be asked. A check
    # that did anything per step (a call, a lock, a clock read) would add 20,000 of them; a
    # few calls once per pass (the garbage collector's, say) are not the step's.
    armed, never = _calls(loader), _calls(plain)
    assert armed["call"] - never["call"] < 100, (armed, never)
    assert never["call"] < 20_000 + 100, never  # and the loop itself: one Python call a step
    assert armed["c_call"] - never["c_call"] < 100, (armed, never)


def _calls(iterable: Any) -> dict[str, int]:
    """The function calls one pass over ``iterable`` makes (sys.setprofile's events)."""
    counted = {"call": 0, "c_call": 0}

    def count(frame: Any, event: str, arg: Any) -> None:
        if event in counted:
            counted[event] += 1

    sys.setprofile(count)
    try:
        for _ in iterable:
            pass
    finally:
        sys.setprofile(None)
    return counted
