"""Where a trial runs, the labels of ``trainwatch_trial_info`` (docs/design.md, Trial table):
its process (``nodename``, ``pid``, ``world_size``) and who and what it runs for, so GPU time
is attributed without root: the Kubernetes namespace and pod (the downward API's variables,
helm/README.md), the Slurm job and its user (Slurm's variables) and the OS user name. Every
label is always there, empty where unknown (Prometheus drops an empty label: absent), and each
value is at most ``names.MAX_LABEL_LENGTH`` characters.

>>> from trial_instrumentation.config import resolve
>>> info = info_labels(resolve(env={"SLURM_JOB_ID": "4242", "TRAINWATCH_NODENAME": "n1"}))
>>> info["nodename"], info["slurm_job_id"], info["k8s_namespace"]
('n1', '4242', '')
"""

from __future__ import annotations

import os

from trial_instrumentation import names
from trial_instrumentation.config import TrialConfig

# The label names, in the order trainwatch_trial_info carries them after the process's own.
PLACEMENT_LABELS = ("k8s_namespace", "k8s_pod", "slurm_job_id", "slurm_job_user", "user")


def user_name() -> str:
    """The name of the user the process runs as (its real uid), cut to MAX_LABEL_LENGTH; empty
    where the uid has no name (a container's arbitrary uid) or the platform has no ``pwd``."""
    try:
        import pwd

        return pwd.getpwuid(os.getuid()).pw_name[:names.MAX_LABEL_LENGTH]
    except (ImportError, KeyError, OSError):
        return ""


def info_labels(cfg: TrialConfig) -> dict[str, str]:
    """``trainwatch_trial_info``'s labels (less the grouping key) and their values."""
    return {"nodename": cfg.nodename, "pid": str(os.getpid()), "world_size": str(cfg.world_size),
            "k8s_namespace": cfg.k8s_namespace, "k8s_pod": cfg.k8s_pod,
            "slurm_job_id": cfg.slurm_job_id, "slurm_job_user": cfg.slurm_job_user,
            "user": user_name()}
