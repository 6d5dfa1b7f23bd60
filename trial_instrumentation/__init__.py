"""trainwatch trial instrumentation: training-loop timings pushed to a Pushgateway.

>>> import trial_instrumentation as ti
>>> with ti.Trial() as trial:   # configured by TRAINWATCH_* here; unset: a no-op
...     for batch in trial.loader([[1.0, 2.0], [3.0]]):
...         with trial.phase(ti.TRAIN_BATCH):
...             print(sum(batch))
3.0
3.0
"""

from trial_instrumentation.names import (
    CUDA_EVENTS,
    CUDA_SYNC,
    DATALOADER_NEXT,
    DEFAULT_BUCKETS,
    FROM_DEVICE,
    REDUCE_METRICS,
    STANDARD_PHASES,
    STEP_LR_SCHEDULERS,
    TIMING_MODES,
    TO_DEVICE,
    TRAIN_BATCH,
    WAIT_FOR_RANKS,
    WALL,
)
from trial_instrumentation.trial import Trial

__all__ = [
    "CUDA_EVENTS", "CUDA_SYNC", "DATALOADER_NEXT", "DEFAULT_BUCKETS", "FROM_DEVICE",
    "REDUCE_METRICS", "STANDARD_PHASES", "STEP_LR_SCHEDULERS", "TIMING_MODES", "TO_DEVICE",
    "TRAIN_BATCH", "WAIT_FOR_RANKS", "WALL", "Trial",
]
