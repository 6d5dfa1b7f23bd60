"""The trial handle (trial_instrumentation/trial.py) in this process: disabled, pulled (a real
/metrics on loopback) and pushed (to a scripted Pushgateway on loopback), its phase names,
limits, FLOPs, close hooks and exit reasons, each read back from what it publishes."""

from __future__ import annotations

import logging
import signal
import socket
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from types import SimpleNamespace
from typing import Any

import pytest
from prometheus_client.parser import text_string_to_metric_families

from benchmarks.http_load import BlackHole
from tests.loopback import Script, scripted_server
from trial_instrumentation import names
from trial_instrumentation.profile_trace import ProfileSummary
from trial_instrumentation.steps import NoopStepRecorder, StepRecorder
from trial_instrumentation.timing import NoopPhase, Phase
from trial_instrumentation.trial import MAX_LOGGED_BAD_NAMES, Trial

LOGGER = "trial_instrumentation.trial"


class Surprise(Exception):
    """An exception no narrower ``except`` clause would name: whatever fails, training goes on."""


@pytest.fixture(autouse=True)
def _no_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    for variable in (names.ENV_PUSHGATEWAY, names.ENV_PULL_PORT, "RANK", "WORLD_SIZE",
                     "LOCAL_RANK", "TRAINWATCH_EXPERIMENT", "TRAINWATCH_TRIAL"):
        monkeypatch.delenv(variable, raising=False)


@pytest.fixture(scope="module")
def gateway() -> Iterator[tuple[str, Script]]:
    with scripted_server() as served:
        yield served


def _wait_for(check: Any, seconds: float = 10.0) -> None:
    deadline = time.monotonic() + seconds
    while not check():
        assert time.monotonic() < deadline, "not in time"
        time.sleep(0.01)


def _pull(trial_name: str, **kwargs: Any) -> Trial:
    return Trial(experiment="unit", trial=trial_name, pull_port=0, rank=0, world_size=1,
                 **kwargs)


def _value(trial: Trial, name: str, **labels: str) -> float | None:
    """A sample's value; a pulled trial's series carry its key too."""
    key = trial.config.grouping_key if trial.config.pull_port is not None else {}
    return trial.registry.get_sample_value(name, {**key, **labels})


# Disabled ----------------------------------------------------------------------------------

def test_a_trial_without_a_gateway_or_port_is_a_cheap_no_op_said_once(
        caplog: pytest.LogCaptureFixture) -> None:
    trial = Trial(experiment="unit", trial="off")
    assert trial.enabled is False
    batches = [[1.0], [2.0]]
    assert trial.loader(batches) is batches
    assert isinstance(trial.step_recorder(), NoopStepRecorder)
    assert isinstance(trial.phase("train_batch"), NoopPhase)
    assert list(trial.registry.collect()) == []
    trial.profile(3)  # nothing to ask
    with caplog.at_level(logging.INFO, logger=LOGGER):
        assert trial.start() is trial
        assert len(caplog.records) == 1  # said at the first start
        trial.start()
    said = [r.getMessage() for r in caplog.records]
    assert said == [(f"trainwatch: disabled, timings are not recorded: no Pushgateway configured "
                    f"(set {names.ENV_PUSHGATEWAY} or pass pushgateway=) and no pull port "
                    f"({names.ENV_PULL_PORT})")]
    assert trial.pull_port is None
    trial.close()
    trial.close()


def test_from_env_reads_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("TRAINWATCH_EXPERIMENT", "env-exp")
    monkeypatch.setenv("TRAINWATCH_TRIAL", "env-trial")
    trial = Trial.from_env()
    assert isinstance(trial, Trial)
    assert (trial.config.experiment, trial.config.trial) == ("env-exp", "env-trial")
    assert trial.enabled is False


# Pulled ------------------------------------------------------------------------------------

def test_a_pulled_trial_serves_its_series_with_its_key_until_closed(
        caplog: pytest.LogCaptureFixture) -> None:
    trial = _pull("served")
    assert trial.enabled is True
    assert trial.pull_port is None  # not before start
    with caplog.at_level(logging.INFO, logger=LOGGER):
        trial.start()
    port = trial.pull_port
    assert isinstance(port, int) and port > 0
    assert [r.getMessage() for r in caplog.records] == [
        f"trainwatch: serving trial unit/served rank 0 on port {port} at /metrics"]
    trial.start()  # again: the same server
    assert trial.pull_port == port
    for _ in trial.loader([[1.0, 2.0], [3.0, 4.0], [5.0, 6.0]]):
        pass
    assert trial._profiler is not None
    trial._profiler._on_written(ProfileSummary(path="/t/trace.json.gz", first_step=3, steps=2,
                                               device="cpu", self_seconds=0.25,
                                               top_ops=(("aten::mm", 0.125),)))
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10) as answer:
        body = answer.read().decode()
    assert 'trainwatch_trial_steps_total{experiment="unit",rank="0",trial="served"} 3.0' in body
    assert "trainwatch_trial_start_time_seconds" in body
    assert 'trainwatch_trial_profile_steps{experiment="unit",rank="0",trial="served"} 2.0' in body
    samples = [s for family in text_string_to_metric_families(body)
               for s in family.samples if s.name.startswith("trainwatch_trial_")]
    assert any(s.name.startswith("trainwatch_trial_loader_") for s in samples)  # processes
    key = {"experiment": "unit", "rank": "0", "trial": "served"}
    assert all(s.labels.items() >= key.items() for s in samples)
    trial.close()
    with pytest.raises(urllib.error.URLError):
        urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=2)


def test_a_taken_port_is_logged_and_training_goes_on(caplog: pytest.LogCaptureFixture) -> None:
    with socket.socket() as taken:
        taken.bind(("", 0))
        taken.listen()
        port = taken.getsockname()[1]
        trial = Trial(experiment="unit", trial="taken", pull_port=port, rank=0, world_size=1)
        with caplog.at_level(logging.INFO, logger=LOGGER):
            trial.start()
        try:
            assert trial.pull_port is None
            assert [r.levelno for r in caplog.records] == [logging.ERROR]
            assert caplog.records[0].getMessage().startswith(
                f"trainwatch: cannot serve /metrics on port {port}: ")
            # Started all the same: the key is claimed, the start time set.
            assert trial._state.started_at is not None
        finally:
            trial.close()


def test_started_at_is_set_at_the_first_start_only(gateway: tuple[str, Script]) -> None:
    trial = _pushed(gateway, "started")
    assert trial._state.started_at is None
    before = time.time()
    trial.start()
    first = trial._state.started_at
    assert first is not None and before <= first <= time.time()
    pusher = trial._pusher
    assert pusher is not None
    trial.start()  # again: the same start, the same pusher
    assert trial._state.started_at == first
    assert trial._pusher is pusher
    trial.close()
    assert _value(trial, "trainwatch_trial_exit", reason=names.EXIT_CLEAN) == 1.0


# Pushed ------------------------------------------------------------------------------------

def _pushed(gateway: tuple[str, Script], trial_name: str, **kwargs: Any) -> Trial:
    url, _ = gateway
    return Trial(experiment="unit", trial=trial_name, pushgateway=url, push_interval=3600,
                 rank=0, world_size=1, exit_timeout=5, **kwargs)


def _bodies(script: Script, trial_name: str) -> list[str]:
    return [r.body.decode() for r in script.requests if r.path.endswith(f"/trial/{trial_name}")]


def test_a_pushed_trial_says_where_pushes_at_once_and_marks_its_final_push(
        gateway: tuple[str, Script], caplog: pytest.LogCaptureFixture) -> None:
    url, script = gateway
    before = signal.getsignal(signal.SIGTERM)
    trial = _pushed(gateway, "pushed")
    with caplog.at_level(logging.INFO, logger=LOGGER):
        trial.start()
    try:
        assert [r.getMessage() for r in caplog.records] == [
            (f"trainwatch: pushing trial unit/pushed rank 0 to {url} every 3600s "
            f"(job {names.JOB})")]
        _wait_for(lambda: _bodies(script, "pushed"))
        assert signal.getsignal(signal.SIGTERM) != before  # SIGTERM pushes "terminated"
        assert trial.pull_port is None
        first = _bodies(script, "pushed")[0]
        assert "trainwatch_trial_steps_total 0.0" in first  # the key is in the path only
        assert "trainwatch_trial_exit" not in first
        assert "trainwatch_trial_loader_" in first  # the loader's processes are pushed too
        assert 'experiment="' not in first and 'rank="' not in first
        trial._profiler._on_written(ProfileSummary(  # type: ignore[union-attr]
            path="/t/p.json.gz", first_step=1, steps=4, device="cpu", self_seconds=0.5,
            top_ops=()))
        assert _value(trial, "trainwatch_trial_profile_steps") == 4.0
    finally:
        trial.close()
    final = _bodies(script, "pushed")[-1]
    assert 'trainwatch_trial_exit{reason="clean"} 1.0' in final
    assert signal.getsignal(signal.SIGTERM) == before  # put back


@pytest.mark.parametrize(("error", "reason"), [
    (None, names.EXIT_CLEAN), (RuntimeError("boom"), names.EXIT_FAILED),
    (SystemExit(0), names.EXIT_CLEAN), (SystemExit(None), names.EXIT_CLEAN),
    (SystemExit(2), names.EXIT_FAILED), (SystemExit("bye"), names.EXIT_FAILED),
    (KeyboardInterrupt(), names.EXIT_FAILED)])
def test_the_with_block_ends_with_the_reason_its_exit_gives(
        gateway: tuple[str, Script], error: BaseException | None, reason: str) -> None:
    trial = _pushed(gateway, f"exit-{reason}-{type(error).__name__}")
    try:
        with trial as entered:
            assert entered is trial
            if error is not None:
                raise error
    except BaseException as caught:  # noqa: BLE001 - the very error given
        assert caught is error
    assert _value(trial, "trainwatch_trial_exit", reason=reason) == 1.0
    other = {names.EXIT_CLEAN, names.EXIT_FAILED, names.EXIT_TERMINATED} - {reason}
    assert all(_value(trial, "trainwatch_trial_exit", reason=r) is None for r in other)


def test_close_takes_an_explicit_reason_and_closes_once(gateway: tuple[str, Script]) -> None:
    trial = _pushed(gateway, "reasoned")
    trial.start()
    trial.close(clean=False, reason=names.EXIT_TERMINATED)
    assert _value(trial, "trainwatch_trial_exit", reason=names.EXIT_TERMINATED) == 1.0
    trial.close()  # the first close stands
    assert _value(trial, "trainwatch_trial_exit", reason=names.EXIT_CLEAN) is None
    failed = _pull("failed-close")
    failed.close(clean=False)
    assert _value(failed, "trainwatch_trial_exit", reason=names.EXIT_FAILED) == 1.0


def test_close_frees_the_key_for_the_next_trial(gateway: tuple[str, Script]) -> None:
    first = _pushed(gateway, "one-key")
    first.start()
    with pytest.raises(ValueError):
        _pushed(gateway, "one-key")  # refused when made, not only when started
    first.close()
    first.start()  # a closed trial started again claims nothing
    again = _pushed(gateway, "one-key")
    again.start()
    again.close()


def test_before_close_hooks_run_first_in_order_a_failing_one_logged(
        gateway: tuple[str, Script], caplog: pytest.LogCaptureFixture) -> None:
    trial = _pushed(gateway, "hooks")
    trial.start()
    seen: list[str] = []

    def broken() -> None:
        seen.append("broken")
        raise Surprise("hook")

    trial.before_close(lambda: seen.append(f"first {trial._state.exit_reason}"))
    trial.before_close(broken)
    trial.before_close(lambda: seen.append("third"))
    with caplog.at_level(logging.ERROR, logger=LOGGER):
        trial.close()
    assert seen == ["first None", "broken", "third"]  # before the exit reason is set
    assert [r.getMessage() for r in caplog.records] == [
        "trainwatch: a before-close hook failed"]
    assert _value(trial, "trainwatch_trial_exit", reason=names.EXIT_CLEAN) == 1.0
    trial.close()
    assert seen == ["first None", "broken", "third"]


# Phases ------------------------------------------------------------------------------------

def test_a_phase_is_made_once_and_timed_into_its_series() -> None:
    trial = _pull("phases")
    try:
        timer = trial.phase("train_batch")
        assert isinstance(timer, Phase)
        assert trial.phase("train_batch") is timer
        assert trial.timed("train_batch") is timer
        with timer:
            pass
        assert _value(trial, "trainwatch_trial_phase_seconds_count", phase="train_batch") == 1.0
        assert isinstance(trial.phase(names.DATALOADER_NEXT), Phase)
    finally:
        trial.close()


def test_bad_phase_names_are_no_ops_logged_once_each_up_to_the_limit(
        caplog: pytest.LogCaptureFixture) -> None:
    trial = _pull("bad-names")
    try:
        longest = "x" * names.MAX_LABEL_LENGTH
        assert isinstance(trial.phase(longest), Phase)  # exactly the limit: timed
        with caplog.at_level(logging.ERROR, logger=LOGGER):
            for bad in ("", 7, None, ["list"], "y" * (names.MAX_LABEL_LENGTH + 1), ""):
                timer = trial.phase(bad)  # type: ignore[arg-type]
                assert isinstance(timer, NoopPhase)
                with timer:
                    pass
        said = [r.getMessage() for r in caplog.records]
        assert len(said) == 5  # the second "" is not logged again
        assert said[0] == "trainwatch: phase name '' is not a non-empty string; that phase " \
                          "is not timed"
        assert said[1].startswith("trainwatch: phase name 7 is not a non-empty string")
        assert "is longer than 256 characters (names.MAX_LABEL_LENGTH)" in said[4]
        assert set(trial._state.phases) == {longest}
        caplog.clear()
        with caplog.at_level(logging.ERROR, logger=LOGGER):
            for k in range(MAX_LOGGED_BAD_NAMES + 5):
                trial.phase(k)  # type: ignore[arg-type]
        # Ten distinct names logged in all: five before, five now; the rest quietly.
        assert MAX_LOGGED_BAD_NAMES == 10
        assert len(caplog.records) == 5
    finally:
        trial.close()


def test_a_new_name_past_the_phase_limit_is_not_timed_and_not_kept() -> None:
    trial = _pull("many-phases")
    try:
        for k in range(names.MAX_PHASES):
            assert isinstance(trial.phase(f"own_{k}"), Phase)
        past = trial.phase("one_too_many")
        assert isinstance(past, NoopPhase)
        assert "one_too_many" not in trial._phases
        assert isinstance(trial.phase(names.TRAIN_BATCH), Phase)  # standard: always
    finally:
        trial.close()


def test_a_disabled_trials_phases_are_no_ops_even_for_good_names() -> None:
    trial = Trial(experiment="unit", trial="off-phases")
    assert isinstance(trial.phase(names.DATALOADER_NEXT), NoopPhase)
    assert trial.phase("x") is trial.phase("x")


class FakeTorchTiming:
    """trial_instrumentation.torch_timing as the trial uses it, with CUDA there or not."""

    def __init__(self, cuda: bool) -> None:
        self.cuda = cuda
        self.resolvers: list[FakeTorchTiming.EventResolver] = []
        owner = self

        class SyncPhase(Phase):
            pass

        class EventPhase(Phase):
            def __init__(self, name: str, histogram: Any, resolver: Any) -> None:
                super().__init__(name, histogram)
                self.resolver = resolver

        class EventResolver:
            def __init__(self) -> None:
                self.calls: list[Any] = []
                owner.resolvers.append(self)

            def resolve_safely(self) -> None:
                self.calls.append("resolve")

            def drain(self, seconds: float) -> None:
                self.calls.append(("drain", seconds))

            def stop(self) -> None:
                self.calls.append("stop")

        self.SyncPhase, self.EventPhase, self.EventResolver = SyncPhase, EventPhase, EventResolver

    def cuda_available(self) -> bool:
        return self.cuda


def _torch_timing(monkeypatch: pytest.MonkeyPatch, fake: Any) -> None:
    import trial_instrumentation

    monkeypatch.delattr(trial_instrumentation, "torch_timing", raising=False)
    monkeypatch.setitem(sys.modules, "trial_instrumentation.torch_timing", fake)


@pytest.mark.parametrize("mode", [names.CUDA_SYNC, names.CUDA_EVENTS])
def test_cuda_timing_without_cuda_times_wall_clock_and_says_so(
        mode: str, caplog: pytest.LogCaptureFixture, monkeypatch: pytest.MonkeyPatch) -> None:
    fake = FakeTorchTiming(cuda=False)
    _torch_timing(monkeypatch, fake)
    with caplog.at_level(logging.WARNING, logger=LOGGER):
        trial = _pull(f"mode-{mode}", timing_mode=mode)
    try:
        assert [r.getMessage() for r in caplog.records] == [
            f"trainwatch: timing_mode={mode} needs CUDA; timing wall clock"]
        assert type(trial.phase("train_batch")) is Phase
        assert trial._resolver is None and fake.resolvers == []
    finally:
        trial.close()


def test_cuda_timing_without_torch_times_wall_clock_and_says_so(
        caplog: pytest.LogCaptureFixture, monkeypatch: pytest.MonkeyPatch) -> None:
    _torch_timing(monkeypatch, None)  # import fails
    with caplog.at_level(logging.WARNING, logger=LOGGER):
        trial = _pull("no-torch", timing_mode=names.CUDA_EVENTS)
    try:
        assert [r.getMessage() for r in caplog.records] == [
            "trainwatch: timing_mode=cuda_events needs torch; timing wall clock"]
        assert type(trial.phase("train_batch")) is Phase
    finally:
        trial.close()


def test_cuda_sync_timing_times_every_phase_but_the_fetch_with_a_sync(
        caplog: pytest.LogCaptureFixture, monkeypatch: pytest.MonkeyPatch) -> None:
    fake = FakeTorchTiming(cuda=True)
    _torch_timing(monkeypatch, fake)
    with caplog.at_level(logging.WARNING, logger=LOGGER):
        # A setting as the environment gives it: equal to the name, not the same object.
        trial = _pull("sync", timing_mode="cuda_" + "sync"[: len("sync")])
    try:
        assert caplog.records == []
        assert type(trial.phase("train_batch")) is fake.SyncPhase
        assert type(trial.phase("backward")) is fake.SyncPhase  # sorts before the fetch
        # Host-side by nature, however the name was made.
        assert type(trial.phase("dataloader_" + "next"[: len("next")])) is Phase
        assert fake.resolvers == [] and trial._state.resolve_pending is None
    finally:
        trial.close()


def test_cuda_event_timing_resolves_at_each_collection_and_drains_at_close(
        gateway: tuple[str, Script], monkeypatch: pytest.MonkeyPatch) -> None:
    fake = FakeTorchTiming(cuda=True)
    _torch_timing(monkeypatch, fake)
    trial = _pushed(gateway, "events", timing_mode=names.CUDA_EVENTS)
    [resolver] = fake.resolvers
    timer = trial.phase("train_batch")
    assert type(timer) is fake.EventPhase
    assert timer.resolver is resolver  # type: ignore[union-attr]
    assert type(trial.phase(names.DATALOADER_NEXT)) is Phase
    assert trial._state.resolve_pending == resolver.resolve_safely
    trial.start()
    trial.close()
    # Drained for half the exit timeout (the final push has the other half), then stopped,
    # before the final push collects (and resolves) once more.
    assert [c for c in resolver.calls if c != "resolve"] == [("drain", 2.5), "stop"]
    drained = resolver.calls.index(("drain", 2.5))
    assert "resolve" in resolver.calls[:drained]  # the first push's collection
    assert resolver.calls[drained + 2:] == ["resolve"]


def test_wall_timing_says_nothing(caplog: pytest.LogCaptureFixture) -> None:
    with caplog.at_level(logging.WARNING, logger=LOGGER):
        trial = _pull("wall", timing_mode="wa" + "ll"[: len("ll")])
    trial.close()
    assert caplog.records == []


# Loader, steps, limits, FLOPs, profile -----------------------------------------------------

def test_the_loader_and_the_step_recorder_count_steps_and_samples() -> None:
    trial = _pull("loader")
    try:
        assert [b for b in trial.loader([[1, 2, 3], [4, 5, 6]], samples=4)] == [[1, 2, 3],
                                                                                [4, 5, 6]]
        assert _value(trial, "trainwatch_trial_steps_total") == 2.0
        assert _value(trial, "trainwatch_trial_samples_total") == 8.0
        assert _value(trial, "trainwatch_trial_phase_seconds_count",
                      phase=names.DATALOADER_NEXT) == 2.0
        recorder = trial.step_recorder()
        assert isinstance(recorder, StepRecorder)
        recorder.fetched(0.5)
        recorder.stepped(1.25, 16)
        assert _value(trial, "trainwatch_trial_steps_total") == 3.0
        assert _value(trial, "trainwatch_trial_samples_total") == 24.0
        assert _value(trial, "trainwatch_trial_phase_seconds_count",
                      phase=names.DATALOADER_NEXT) == 3.0
    finally:
        trial.close()


@pytest.mark.parametrize("bad", [0.0, -2.5, float("inf"), float("nan")])
def test_a_step_limit_is_positive_finite_samples_per_second(bad: float) -> None:
    trial = Trial(experiment="unit", trial="limit")
    with pytest.raises(ValueError, match="a step limit is samples/s > 0"):
        trial.set_step_limit(bad)


def test_limits_are_published_once_set_or_measured() -> None:
    trial = _pull("limits")
    try:
        trial.set_step_limit(0.5)  # below one sample a second is a rate too
        assert _value(trial, names.STEP_LIMIT) == 0.5
        trial.set_step_limit(125)
        assert _value(trial, names.STEP_LIMIT) == 125.0
        assert isinstance(trial._state.limits[names.STEP_LIMIT], float)
        assert _value(trial, names.LOADER_LIMIT) is None
        rate = trial.measure_loader_limit(range(10**9), seconds=0.02, samples=3)
        assert rate > 0 and _value(trial, names.LOADER_LIMIT) == rate
        step = trial.measure_step_limit(lambda batch: None, [1, 2], seconds=0.02, samples=2)
        assert step > 0 and _value(trial, names.STEP_LIMIT) == step
    finally:
        trial.close()


def test_flops_are_published_with_their_precision_and_a_failed_count_is_a_warning(
        caplog: pytest.LogCaptureFixture, monkeypatch: pytest.MonkeyPatch) -> None:
    given = _pull("flops-given", flops_per_sample=2.5e9, precision="bf16")
    assert _value(given, names.MODEL_FLOPS, precision="bf16") == 2.5e9
    given.close()
    trial = _pull("flops")
    try:
        assert _value(trial, names.MODEL_FLOPS, precision="fp16") is None
        trial.set_flops_per_sample(3.5e9, "fp16")
        assert _value(trial, names.MODEL_FLOPS, precision="fp16") == 3.5e9
        with pytest.raises(ValueError):
            trial.measure_flops_per_sample(object(), [], "fp99")
        from trial_instrumentation import flops

        monkeypatch.setattr(flops, "measure_flops_per_sample",
                            lambda model, batch, samples, loss: 7.0e9)
        assert trial.measure_flops_per_sample(object(), [], "tf32") == 7.0e9
        assert _value(trial, names.MODEL_FLOPS, precision="tf32") == 7.0e9

        def broken(model: Any, batch: Any, samples: Any, loss: Any) -> float:
            raise RuntimeError("no forward")

        monkeypatch.setattr(flops, "measure_flops_per_sample", broken)
        with caplog.at_level(logging.WARNING, logger=LOGGER):
            assert trial.measure_flops_per_sample(object(), [], "fp32") is None
        assert [r.getMessage() for r in caplog.records] == [
            ("trainwatch: counting the model's FLOPs failed (RuntimeError: 'no forward'); its "
            "FLOPs and MFU stay unknown")]
        assert _value(trial, names.MODEL_FLOPS, precision="tf32") == 7.0e9  # kept
    finally:
        trial.close()


def test_a_profile_request_is_handed_to_the_profiler_with_its_steps() -> None:
    trial = _pull("profiled")
    try:
        assert trial._profiler is not None
        trial.profile(7)
        assert trial._profiler._pending == (7, "a call")
        trial.profile()
        assert trial._profiler._pending == (trial.config.profile.steps, "a call")
        with pytest.raises(ValueError):
            trial.profile(0)
    finally:
        trial.close()


def test_a_real_count_that_raises_anything_is_one_warning_and_the_flops_stay_unknown(
        caplog: pytest.LogCaptureFixture) -> None:
    """The real count on a batch the model cannot take: a Hugging Face-style dict given to a
    plain module raises TypeError (no RuntimeError, no ValueError), and the run goes on."""
    torch = pytest.importorskip("torch")
    trial = _pull("flops-typeerror")
    try:
        with caplog.at_level(logging.WARNING, logger=LOGGER):
            assert trial.measure_flops_per_sample(
                torch.nn.Linear(4, 2), {"input_ids": torch.ones(3, 4)}, "bf16") is None
        messages = [r.getMessage() for r in caplog.records]
        assert len(messages) == 1 and messages[0].startswith(
            "trainwatch: counting the model's FLOPs failed (TypeError: "), messages
        assert _value(trial, names.MODEL_FLOPS, precision="bf16") is None
        counted = trial.measure_flops_per_sample(torch.nn.Linear(4, 2), (torch.ones(3, 4), None),
                                                 "bf16")  # a batch it takes: counted after all
        assert counted is not None and counted > 0
        assert _value(trial, names.MODEL_FLOPS, precision="bf16") == counted
    finally:
        trial.close()


def test_torchs_threads_are_noted_at_start_when_torch_is_imported(
        gateway: tuple[str, Script], monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "torch", SimpleNamespace(get_num_threads=lambda: 6))
    trial = _pushed(gateway, "threads")
    try:
        assert _value(trial, names.COMPUTE_THREADS) is None  # not before start
        trial.start()
        assert _value(trial, names.COMPUTE_THREADS) == 6.0

        def half_imported() -> int:
            raise AttributeError("partially initialized module 'torch'")

        monkeypatch.setitem(sys.modules, "torch", SimpleNamespace(get_num_threads=half_imported))
        trial.start()
        assert _value(trial, names.COMPUTE_THREADS) is None

        def broken() -> int:
            raise Surprise("get_num_threads")

        for torch_now, threads in ((lambda: 6, 6.0), (broken, None)):
            monkeypatch.setitem(sys.modules, "torch", SimpleNamespace(get_num_threads=torch_now))
            trial.start()
            assert _value(trial, names.COMPUTE_THREADS) == threads
    finally:
        trial.close()
    monkeypatch.delitem(sys.modules, "torch")
    bare = _pushed(gateway, "no-torch-threads")
    bare.start()
    bare.close()
    assert _value(bare, names.COMPUTE_THREADS) is None


def test_disabled_trials_claim_no_key_and_publish_no_flops_without_them() -> None:
    first, second = Trial(experiment="unit", trial="same"), Trial(experiment="unit", trial="same")
    first.start()
    second.start()  # no key is held by a trial that records nothing
    first.close()
    second.close()
    only_precision = _pull("precision-only", precision="bf16")
    assert only_precision._state.model_flops is None
    only_precision.close()


def test_start_installs_the_profile_signal_and_close_takes_it_back(
        gateway: tuple[str, Script]) -> None:
    before = signal.getsignal(signal.SIGUSR2)
    trial = _pushed(gateway, "profile-signal")
    assert signal.getsignal(signal.SIGUSR2) == before  # not before start
    trial.start()
    try:
        assert signal.getsignal(signal.SIGUSR2) != before
    finally:
        trial.close()
    assert signal.getsignal(signal.SIGUSR2) == before


def test_limits_are_measured_for_ten_seconds_by_default(monkeypatch: pytest.MonkeyPatch) -> None:
    from trial_instrumentation import limits

    asked: list[tuple[str, float]] = []
    monkeypatch.setattr(limits, "loader_limit",
                        lambda loader, seconds, samples: asked.append(("loader", seconds)) or 5.0)
    monkeypatch.setattr(limits, "step_limit", lambda step, batch, seconds, samples:
                        asked.append(("step", seconds)) or 7.0)
    trial = Trial(experiment="unit", trial="default-limits")
    assert trial.measure_loader_limit([1]) == 5.0
    assert trial.measure_step_limit(lambda batch: None, [1]) == 7.0
    assert asked == [("loader", 10.0), ("step", 10.0)]


def test_measure_flops_takes_samples_and_loss_by_keyword_only(
        monkeypatch: pytest.MonkeyPatch) -> None:
    from trial_instrumentation import flops

    seen: list[tuple[Any, Any]] = []

    def count(model: Any, batch: Any, samples: Any, loss: Any) -> float:
        seen.append((samples, loss))
        return 4.0e9

    monkeypatch.setattr(flops, "measure_flops_per_sample", count)
    trial = Trial(experiment="unit", trial="flops-keywords")
    assert trial.measure_flops_per_sample(model=object(), batch=[1], precision="bf16",
                                          samples=8, loss=len) == 4.0e9
    assert seen == [(8, len)]
    with pytest.raises(TypeError):
        trial.measure_flops_per_sample(object(), [1], "bf16", 8)  # type: ignore[misc]


def test_a_profile_request_hears_of_the_steps_of_the_loader_and_the_recorder(
        monkeypatch: pytest.MonkeyPatch) -> None:
    from trial_instrumentation.profiling import OnDemandProfiler

    ended: list[str] = []
    monkeypatch.setattr(OnDemandProfiler, "step_ended", lambda self: ended.append("step"))
    trial = _pull("profile-steps")
    try:
        trial.profile(2)
        for _ in trial.loader([[1.0], [2.0]], samples=1):
            pass
        assert len(ended) >= 2
        ended.clear()
        recorder = trial.step_recorder()
        recorder.fetched(0.01)
        recorder.stepped(0.1, 1)
        assert ended == ["step"]
    finally:
        trial.close()


def test_the_final_push_is_bounded_by_the_exit_timeout_not_the_read_timeout(
        caplog: pytest.LogCaptureFixture) -> None:
    # A gateway that accepts and never answers: the push in flight waits out its read timeout
    # (4 s here), but closing the trial waits exit_timeout (0.3 s) for it, and says so.
    hole = BlackHole()
    trial = Trial(experiment="e", trial="t", pushgateway=hole.url, rank=0, world_size=1,
                  connect_timeout=1, read_timeout=4, exit_timeout=0.3)
    try:
        trial.start()
        _wait_for(lambda: hole.accepted)  # the first push is in flight
        closing = time.monotonic()
        with caplog.at_level(logging.WARNING, logger="trial_instrumentation.pusher"):
            trial.close()
        took = time.monotonic() - closing
    finally:
        hole.close()
    assert took < 2.0, took  # the read timeout (4 s) would be twice that
    gave_up = [r.getMessage() for r in caplog.records if "did not finish" in r.getMessage()]
    assert len(gave_up) == 1 and "within 0.3s" in gave_up[0], gave_up
    assert "within 4.0s" not in gave_up[0]
