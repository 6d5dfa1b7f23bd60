"""``python -m trial_instrumentation.auto``: the directory to put first on ``PYTHONPATH`` (with
``TRAINWATCH_AUTO=1``) to time this environment's training scripts without ``trainwatch run``."""

from pathlib import Path

print(Path(__file__).resolve().parent / "site")
