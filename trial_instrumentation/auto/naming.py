"""Names for a trial nobody named: experiment and trial from the scheduler's environment, else
from the script and its start (docs/instrumentation.md, "Zero lines: trainwatch run").

``TRAINWATCH_EXPERIMENT`` / ``TRAINWATCH_TRIAL`` (what ``trainwatch run --experiment/--trial``
sets) win: the trial's configuration reads them, so they are left to it. Otherwise:

- experiment: Slurm's ``SLURM_JOB_NAME``, else the Kubernetes namespace (the downward API's
  variable the trial's configuration reads, ``names.ENV_K8S_NAMESPACE``), else the script's
  name;
- trial: Slurm's ``SLURM_JOB_ID``, else torchrun's ``TORCHELASTIC_RUN_ID`` (the rendezvous id
  every rank shares), else the pod (``names.ENV_K8S_POD``), else the script's start time
  (under a launcher, the launcher's start: its ranks share it).

Ranks come from the configuration too (torchrun's variables, else Slurm's).

>>> choose({"SLURM_JOB_NAME": "bert", "SLURM_JOB_ID": "4242"}, ["train.py"])
('bert', '4242', 'Slurm, Slurm')
>>> choose({"TORCHELASTIC_RUN_ID": "none"}, ["/x/train.py", "--lr", "1"], started=0.0)[::2]
('train', "the script, the script's start")
"""

from __future__ import annotations

import os
import time
from collections.abc import Mapping, Sequence
from pathlib import Path

from trial_instrumentation import names

# The first of each that is set, and what sets it.
# The Kubernetes variables are the trial's placement settings' (names.py), where declared.
_EXPERIMENT = (("SLURM_JOB_NAME", "Slurm"),
               (getattr(names, "ENV_K8S_NAMESPACE", ""), "Kubernetes"))
_TRIAL = (("SLURM_JOB_ID", "Slurm"), ("TORCHELASTIC_RUN_ID", "torchrun"),
          (getattr(names, "ENV_K8S_POD", ""), "Kubernetes"))


def _label(text: str) -> str:
    """A grouping-key label value: no ``/``, at most ``names.MAX_LABEL_LENGTH``."""
    return text.replace("/", "-")[:names.MAX_LABEL_LENGTH] or "unnamed"


def script_name(argv: Sequence[str]) -> str:
    """The training script in a command (``python train.py``, ``torchrun ... train.py``,
    ``python -m pkg.train``): its stem; else the program's name."""
    for i, arg in enumerate(argv):
        if arg == "-m" and i + 1 < len(argv):
            return _label(argv[i + 1])
        if arg.endswith(".py"):
            return _label(Path(arg).stem)
    return _label(Path(argv[0]).name if argv and argv[0] else "python")


def launch_time(env: Mapping[str, str]) -> float:
    """When this job started: a torchrun rank's launcher's start (every local rank has the same
    parent), else now."""
    if names.ENV_LOCAL_RANK in env and "TORCHELASTIC_RUN_ID" in env:
        try:
            return _process_start(os.getppid())
        except (OSError, ValueError, IndexError):
            pass
    return time.time()


def _process_start(pid: int) -> float:
    stat = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    boot = next(float(line.split()[1]) for line in Path("/proc/stat").read_text().splitlines()
                if line.startswith("btime "))
    return boot + int(stat[19]) / os.sysconf("SC_CLK_TCK")


def _first(env: Mapping[str, str], variables: tuple[tuple[str, str], ...]) -> tuple[str, str]:
    for variable, source in variables:
        value = env.get(variable, "").strip() if variable else ""
        if value and value != "none":  # torchrun's run id without a rendezvous is "none"
            return _label(value), source
    return "", ""


def choose(env: Mapping[str, str], argv: Sequence[str],
           started: float | None = None) -> tuple[str, str, str]:
    """(experiment, trial, where they came from) for a process run as ``argv``."""
    script = script_name(argv)
    experiment, from_ = _first(env, _EXPERIMENT)
    trial, trial_from = _first(env, _TRIAL)
    if not trial:
        when = launch_time(env) if started is None else started
        trial = f"{script}-{time.strftime('%Y%m%d-%H%M%S', time.localtime(when))}"
        trial_from = "the script's start"
    return experiment or script, trial, f"{from_ or 'the script'}, {trial_from}"
