"""The trial handle: configuration, phases, the loader wrapper, and push or pull."""

from __future__ import annotations

import logging
import sys
import time
from collections.abc import Callable, Iterable
from typing import TYPE_CHECKING, Any, TypeVar

from prometheus_client import CollectorRegistry, start_http_server

from trial_instrumentation import config as configuration
from trial_instrumentation import flops, limits, live_keys, names, placement
from trial_instrumentation.collector import TrialCollector, TrialState
from trial_instrumentation.gpus import TrainingGpus
from trial_instrumentation.lifecycle import ExitHooks
from trial_instrumentation.loader import TimedLoader
from trial_instrumentation.loader_processes import LoaderProcessCollector, process_tree
from trial_instrumentation.parsers import shown
from trial_instrumentation.profile_trace import ProfileCollector
from trial_instrumentation.profiling import NEVER, OnDemandProfiler
from trial_instrumentation.pusher import Pusher
from trial_instrumentation.steps import NoopStepRecorder, StepRecorder
from trial_instrumentation.timing import Histogram, NoopPhase, Phase

if TYPE_CHECKING:
    from typing import Self

T = TypeVar("T")
log = logging.getLogger(__name__)
MAX_LOGGED_BAD_NAMES = 10  # distinct bad phase names logged; a name made per step stays quiet
PhaseFactory = Callable[[str, Histogram], Phase]


class Trial:
    """One training process's timings, pushed to a Pushgateway (or served for a PodMonitor).

    Arguments left out come from ``TRAINWATCH_*`` (and torchrun's ``RANK``, ``WORLD_SIZE``,
    ``LOCAL_RANK``); with neither a Pushgateway nor a pull port, every method is a cheap no-op. Bad settings
    raise ``ValueError`` here, naming the argument or variable, never later.

    >>> with Trial(experiment="resnet", trial="lr-0.1") as trial:   # no gateway: a no-op
    ...     for batch in trial.loader([[1.0, 2.0], [3.0, 4.0]]):
    ...         with trial.phase("train_batch"):
    ...             loss = sum(batch)
    >>> loss, trial.enabled
    (7.0, False)
    """

    def __init__(self, experiment: str | None = None, trial: str | None = None,
                 pushgateway: str | None = None, push_interval: float | str | None = None, *,
                 pull_port: int | None = None, rank: int | None = None,
                 world_size: int | None = None, local_rank: int | None = None,
                 gpu_uuids: str | Iterable[str] | None = None,
                 timing_mode: str | None = None, buckets: Iterable[float] | None = None,
                 phase_buckets: str | Iterable[float] | None = None,
                 username: str | None = None, password: str | None = None,
                 connect_timeout: float | str | None = None,
                 read_timeout: float | str | None = None,
                 exit_timeout: float | str | None = None,
                 flops_per_sample: float | str | None = None,
                 precision: str | None = None) -> None:
        # The arguments are the settings of config.arguments() (their types, for a type
        # checker): None is "not given"; the defaults, the variables and the checks are there.
        given = dict(locals())
        del given["self"]
        self.config = configuration.resolve(**given)
        cfg = self.config
        # One live trial per key in a process (live_keys.py): refused here, held from start().
        self._created = live_keys.created_here()
        if cfg.enabled:
            live_keys.check(self._key, self, self._created)
        #: The trial's private registry; register your own collectors here to push them too.
        self.registry = CollectorRegistry()
        self._gpus = TrainingGpus(cfg.local_rank, given=cfg.gpu_uuids)
        self._state = TrialState(cfg.buckets, placement.info_labels(cfg),
                                 gpu_uuids=self._gpus.uuids, phase_buckets=cfg.phase_buckets)
        if cfg.flops_per_sample is not None and cfg.precision is not None:
            self._state.model_flops = (cfg.precision, cfg.flops_per_sample)
        self._phases: dict[str, Phase | NoopPhase] = {}
        self._profiler: OnDemandProfiler | None = None
        self._bad_names: set[str] = set()
        self._resolver: Any = None
        self._pusher: Pusher | None = None
        self._exit_hooks = ExitHooks(lambda reason: self.close(clean=False, reason=reason))
        self._server: Any = None
        self._closed = False
        self._before_close: list[Callable[[], None]] = []
        self._announced = False
        self._make_phase = self._phase_factory() if cfg.enabled else None
        if cfg.enabled:
            pull = cfg.pull_port is not None
            self.registry.register(TrialCollector(self._state,
                                                  cfg.grouping_key if pull else None))
            # The loader's process tree (loader_processes.py): read when pushed, never here.
            self.registry.register(LoaderProcessCollector(process_tree,
                                                          cfg.grouping_key if pull else None))
            # On-demand profiler traces (profiling.py): idle until asked.
            self._profiler = OnDemandProfiler(cfg, lambda: sum(self._state.step.counts),
                                              lambda summary: setattr(profiles, "latest", summary))
            profiles = ProfileCollector(self._profiler.poll_trigger,
                                        cfg.grouping_key if pull else None)
            self.registry.register(profiles)

    @property
    def _key(self) -> live_keys.Key:
        return self.config.experiment, self.config.trial, str(self.config.rank)

    @classmethod
    def from_env(cls) -> Trial:
        """A trial configured only by the environment (the same as ``Trial()``)."""
        return cls()

    @property
    def enabled(self) -> bool:
        return self.config.enabled

    @property
    def pull_port(self) -> int | None:
        """The port ``/metrics`` is served on in pull mode (useful with ``pull_port=0``)."""
        return None if self._server is None else int(self._server.server_port)

    def phase(self, name: str) -> Phase | NoopPhase:
        """The timer of phase ``name``: ``with trial.phase("train_batch"): ...``.

        A name that is not a non-empty string of at most ``names.MAX_LABEL_LENGTH``
        characters is logged (once) and timed by a no-op: a typo must not stop a run hours
        in. So is a new name past ``names.MAX_PHASES`` (only the first one is logged)."""
        try:
            return self._phases[name]
        except (KeyError, TypeError):  # TypeError: an unhashable name, refused in _add_phase
            return self._add_phase(name)

    def timed(self, name: str) -> Phase | NoopPhase:
        """Decorator form: ``@trial.timed("evaluate")`` times every call."""
        return self.phase(name)

    def loader(self, iterable: Iterable[T],
               samples: int | Callable[[T], int] | None = None) -> Iterable[T]:
        """Wrap a DataLoader (any iterable): times ``dataloader_next`` and whole steps and
        counts steps and samples (``samples``: batch size or function; default: inferred)."""
        if not self.enabled:
            return iterable
        return TimedLoader(iterable, self._state.phase_histogram(names.DATALOADER_NEXT),
                           self._state.step, self._state.progress, samples,
                           self._note_training_thread, self._profiler or NEVER)

    def measure_loader_limit(self, loader: Iterable[T], seconds: float = 10.0,
                             samples: int | Callable[[T], int] | None = None) -> float:
        """The samples/s ``loader`` delivers alone (see :func:`limits.loader_limit`), also
        published as ``trainwatch_trial_loader_limit_samples_per_second``."""
        rate = limits.loader_limit(loader, seconds, samples)
        self._state.limits[names.LOADER_LIMIT] = rate
        return rate

    def measure_step_limit(self, step: Callable[[T], Any], batch: T, seconds: float = 10.0,
                           samples: int | Callable[[T], int] | None = None) -> float:
        """The samples/s ``step`` consumes on one cached batch (see :func:`limits.step_limit`),
        also published as ``trainwatch_trial_step_limit_samples_per_second``."""
        rate = limits.step_limit(step, batch, seconds, samples)
        self._state.limits[names.STEP_LIMIT] = rate
        return rate

    def set_step_limit(self, samples_per_second: float) -> None:
        """Publish a step limit measured some other way (a callback's, over the real loop's
        steps less their fetches) as ``trainwatch_trial_step_limit_samples_per_second``."""
        if not 0 < samples_per_second < float("inf"):
            raise ValueError(f"a step limit is samples/s > 0, got {samples_per_second!r}")
        self._state.limits[names.STEP_LIMIT] = float(samples_per_second)

    def set_flops_per_sample(self, flops_per_sample: float, precision: str) -> None:
        """Publish the model's training FLOPs per sample (forward + backward) and the precision
        its matmuls run in (``bf16``, ``fp16``, ``tf32``, ``fp32``, ``fp8``) as
        ``trainwatch_trial_model_flops_per_sample``: with the exporter's peaks, its MFU."""
        self._state.model_flops = (flops.precision(precision),
                                   flops.flops_per_sample(flops_per_sample))

    def measure_flops_per_sample(self, model: Any, batch: Any, precision: str, *,
                                 samples: int | None = None,
                                 loss: Callable[[Any], Any] | None = None) -> float | None:
        """Count one forward + backward of ``model`` on ``batch``, a batch of the training
        loader (see :func:`flops.measure_flops_per_sample`), and publish it as
        :meth:`set_flops_per_sample` does; returns the FLOPs per sample. A measurement never
        fails the trial: one that raises is one warning, and the FLOPs stay unknown (None)."""
        flops.precision(precision)  # a bad setting is the caller's, raised now
        try:
            counted = flops.measure_flops_per_sample(model, batch, samples=samples, loss=loss)
        except Exception as err:  # noqa: BLE001 - a measurement must not cost the run
            log.warning("trainwatch: counting the model's FLOPs failed (%s: %s); its FLOPs "
                        "and MFU stay unknown", type(err).__name__, shown(str(err)))
            return None
        self.set_flops_per_sample(counted, precision)
        return counted

    def before_close(self, finish: Callable[[], None]) -> None:
        """Run ``finish`` first in :meth:`close`, however the trial closes (a crash's or
        SIGTERM's hook included): an integration ends its open step there, so the final push
        counts it."""
        self._before_close.append(finish)

    def step_recorder(self) -> StepRecorder:
        """Steps, samples and ``dataloader_next`` measured by a framework's own hooks, for
        integrations whose loop cannot be wrapped by :meth:`loader` (Lightning, Hugging Face)."""
        if not self.enabled:
            return NoopStepRecorder()
        return StepRecorder(self._state.phase_histogram(names.DATALOADER_NEXT), self._state.step,
                            self._state.progress, self._note_training_thread,
                            self._state.phase_histogram, self._profiler or NEVER)

    def profile(self, steps: int | None = None) -> None:
        """Capture a ``torch.profiler`` trace of the next ``steps`` steps (default
        ``TRAINWATCH_PROFILE_STEPS``), as the signal and the trigger file ask for one
        (docs/instrumentation.md, "Profiler traces on demand"); a no-op when disabled."""
        if self._profiler is not None:
            self._profiler.request(None if steps is None else configuration.profile_steps(steps))

    def start(self) -> Self:
        """Start pushing (or serving); ``with Trial(...)`` calls it."""
        cfg = self.config
        who = f"trial {cfg.experiment}/{cfg.trial} rank {cfg.rank}"
        if cfg.enabled and not self._closed:
            live_keys.claim(self._key, self, self._created)
        if self._state.started_at is None:
            self._state.started_at = time.time()
        if cfg.pushgateway is not None and self._pusher is None:
            self._pusher = Pusher(cfg, self.registry, self._state)
            self._pusher.start()
            self._exit_hooks.install()
            # One line that says where the timings go, so a wrong URL is seen at once.
            log.info("trainwatch: pushing %s to %s every %gs (job %s)", who, cfg.pushgateway,
                     cfg.push_interval, names.JOB)
        elif cfg.pull_port is not None and self._server is None:
            try:
                self._server, _ = start_http_server(cfg.pull_port, registry=self.registry)
                log.info("trainwatch: serving %s on port %d at /metrics", who, self.pull_port)
            except OSError as exc:  # a taken port must not stop training
                log.error("trainwatch: cannot serve /metrics on port %s: %s", cfg.pull_port, exc)
        elif not cfg.enabled and not self._announced:
            log.info("trainwatch: disabled, timings are not recorded: no Pushgateway configured "
                     "(set %s or pass pushgateway=) and no pull port (%s)",
                     names.ENV_PUSHGATEWAY, names.ENV_PULL_PORT)
        self._announced = True
        if self._profiler is not None:
            self._profiler.install()
        self._note_training_thread()
        return self

    def _note_training_thread(self) -> None:
        """What only the training thread can tell (at start and each loader's first step):
        the GPUs it uses and torch's intra-op threads (a setting of the thread that made it)."""
        self._gpus.note()
        torch = sys.modules.get("torch")  # never imported here: a script without torch has none
        if torch is not None:
            try:
                self._state.compute_threads = int(torch.get_num_threads())
            except Exception:  # noqa: BLE001 - a half-imported torch must not stop training
                self._state.compute_threads = None

    def close(self, clean: bool = True, reason: str | None = None) -> None:
        """Final push, marked with ``trainwatch_trial_exit{reason}`` (``reason``: names.EXIT_*,
        by default clean or failed), bounded by ``exit_timeout``. The group is never deleted
        here: Prometheus scrapes the final push, and `trainwatch gc` retires the group
        (docs/design.md, "The life of a group")."""
        if self._closed:
            return
        self._closed = True
        try:
            self._close(clean, reason)
        finally:
            live_keys.release(self._key, self)  # after its final push: the key is free

    def _close(self, clean: bool, reason: str | None) -> None:
        for finish in self._before_close:
            try:
                finish()
            except Exception:  # an integration's hook must not cost the final push
                log.exception("trainwatch: a before-close hook failed")
        if self._profiler is not None:  # a running capture is written, then pushed
            self._profiler.close()
        self._exit_hooks.uninstall()
        self._state.exit_reason = reason or (names.EXIT_CLEAN if clean else names.EXIT_FAILED)
        self._gpus.note()
        if self._resolver is not None:
            self._resolver.drain(self.config.exit_timeout / 2)
            self._resolver.stop()
        if self._pusher is not None:
            self._pusher.stop(timeout=self.config.exit_timeout)
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()

    def __enter__(self) -> Self:
        return self.start()

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: object) -> None:
        self.close(clean=exc is None or (isinstance(exc, SystemExit) and not exc.code))

    def _add_phase(self, name: str) -> Phase | NoopPhase:
        if not isinstance(name, str) or not name:
            return self._bad_phase(name, "is not a non-empty string")
        if len(name) > names.MAX_LABEL_LENGTH:
            return self._bad_phase(name, f"is longer than {names.MAX_LABEL_LENGTH} characters "
                                         "(names.MAX_LABEL_LENGTH)")
        if not self._state.admits(name):  # past names.MAX_PHASES: logged there, once
            return NoopPhase(name)
        histogram = self._state.phase_histogram(name)
        if self._make_phase is None:
            timer: Phase | NoopPhase = NoopPhase(name)
        elif name == names.DATALOADER_NEXT:  # host-side by nature; shares the loader's series
            timer = Phase(name, histogram)
        else:
            timer = self._make_phase(name, histogram)
        return self._phases.setdefault(name, timer)

    def _phase_factory(self) -> PhaseFactory:
        mode = self.config.timing_mode
        if mode == names.WALL:
            return Phase
        try:
            from trial_instrumentation import torch_timing
        except ImportError:
            log.warning("trainwatch: timing_mode=%s needs torch; timing wall clock", mode)
            return Phase
        if not torch_timing.cuda_available():
            log.warning("trainwatch: timing_mode=%s needs CUDA; timing wall clock", mode)
            return Phase
        if mode == names.CUDA_SYNC:
            return torch_timing.SyncPhase
        self._resolver = resolver = torch_timing.EventResolver()
        self._state.resolve_pending = resolver.resolve_safely
        return lambda name, histogram: torch_timing.EventPhase(name, histogram, resolver)

    def _bad_phase(self, name: object, why: str) -> NoopPhase:
        quoted = shown(name)
        if quoted not in self._bad_names and len(self._bad_names) < MAX_LOGGED_BAD_NAMES:
            self._bad_names.add(quoted)
            log.error("trainwatch: phase name %s %s; that phase is not timed", quoted, why)
        return NoopPhase(quoted)
