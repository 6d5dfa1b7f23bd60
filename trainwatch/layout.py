"""Where a stack keeps its files: the state directory (chosen, checked) and the project's own
files it runs from (the checkout this package was installed from)."""

from __future__ import annotations

import fcntl
import os
import shutil
import sys
import uuid
from collections.abc import Iterator, Mapping
from contextlib import contextmanager, suppress
from dataclasses import dataclass
from pathlib import Path

from trial_instrumentation import names

ENV_STATE_DIR = names.CLI_ENV_STATE_DIR
# The checkout holding prometheus/, grafana/ and exporter/ (`pip install -e .` keeps it there).
REPO = Path(__file__).resolve().parent.parent


class StackError(RuntimeError):
    """Something the user can fix: the message is one line that says what to do."""


def default_state_dir(env: Mapping[str, str] | None = None) -> Path:
    """``$TRAINWATCH_STATE_DIR``, else ``$XDG_STATE_HOME/trainwatch``, else
    ``~/.local/state/trainwatch`` (the XDG base directory spec's place for state)."""
    env = os.environ if env is None else env
    if env.get(ENV_STATE_DIR):
        return Path(env[ENV_STATE_DIR]).expanduser()
    xdg = env.get("XDG_STATE_HOME")
    base = Path(xdg) if xdg else Path.home() / ".local" / "state"
    return base / "trainwatch"


@dataclass(frozen=True)
class StateDir:
    """The files of one stack under ``root``: pid records, logs, each service's data.

    Example:
        >>> StateDir(Path("/tmp/tw")).pid_file("prometheus")
        PosixPath('/tmp/tw/run/prometheus.pid')
    """

    root: Path

    @classmethod
    def resolve(cls, given: str | Path | None, env: Mapping[str, str] | None = None) -> StateDir:
        path = Path(given).expanduser() if given else default_state_dir(env)
        return cls(path.absolute())

    @property
    def run_dir(self) -> Path:
        return self.root / "run"

    @property
    def logs(self) -> Path:
        return self.root / "logs"

    @property
    def settings_file(self) -> Path:
        return self.root / "stack.json"

    def forget(self, service: str) -> None:
        """Remove a pid record; a read-only state directory leaves it (it is re-checked anyway)."""
        with suppress(OSError):
            self.pid_file(service).unlink(missing_ok=True)

    def pid_file(self, service: str) -> Path:
        return self.run_dir / f"{service}.pid"

    def log_file(self, service: str) -> Path:
        return self.logs / f"{service}.log"

    def data(self, service: str) -> Path:
        return self.root / service

    def exists(self) -> bool:
        """True when the directory is there; a file in its place is an error, not 'absent'."""
        if self.root.is_dir():
            return True
        if self.root.exists():
            raise self._not_a_dir()
        return False

    def prepare(self) -> None:
        """Create the directory tree and prove it writable, or raise StackError saying why.

        A real write, not ``os.access``: root passes access() on any mode bits, yet still
        fails on a read-only or immutable directory."""
        if self.root.exists() and not self.root.is_dir():
            raise self._not_a_dir()
        probe = self.root / f".write-test-{uuid.uuid4().hex}"
        try:
            for sub in (self.root, self.run_dir, self.logs):
                sub.mkdir(parents=True, exist_ok=True)
            probe.write_bytes(b"")
            probe.unlink()
        except NotADirectoryError:
            raise StackError(f"state directory {self.root}: a parent of it is a file; "
                             f"pass --state-dir DIR or set {ENV_STATE_DIR}") from None
        except OSError as err:
            raise StackError(f"state directory {self.root} is not writable ({err.strerror}); "
                             f"pass --state-dir DIR or set {ENV_STATE_DIR}") from None

    @contextmanager
    def locked(self) -> Iterator[None]:
        """Held by `up` and `down`: two at once would each start (or stop) the same services.
        An flock, so a command that dies releases it with its last descriptor."""
        try:
            handle = open(self.run_dir / "lock", "w")  # noqa: SIM115 - closed below
        except OSError:  # a read-only state dir: `down` must still stop what runs
            yield
            return
        with handle:
            try:
                fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                raise StackError(f"another `trainwatch stack` command is working on "
                                 f"{self.root}; wait for it to finish") from None
            yield

    def _not_a_dir(self) -> StackError:
        return StackError(f"state directory {self.root} is a file, not a directory; "
                          f"pass --state-dir DIR or set {ENV_STATE_DIR}")


def project_file(relative: str) -> Path:
    """A file of the trainwatch checkout, or StackError when this install has none."""
    path = REPO / relative
    if not path.exists():
        raise StackError(f"{path} not found: `trainwatch stack` runs from a trainwatch checkout "
                         "(git clone, then `make run`)")
    return path


def path_hint() -> str | None:
    """How to put this install's `trainwatch` command on PATH (``make run`` installs it into
    .venv-run, ``make demo`` into .venv, which no shell has on PATH); None when it is there
    already or is no script."""
    here = Path(sys.executable).parent / "trainwatch"
    found = shutil.which("trainwatch")
    if not here.is_file() or (found and Path(found).resolve() == here.resolve()):
        return None
    return (f"`trainwatch` is not on your PATH: `source {here.parent / 'activate'}` puts it "
            f"there (or run {here})")
