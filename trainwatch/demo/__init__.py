"""`make demo` (``python -m trainwatch.demo``): a slow and a healthy PyTorch trial on a stack of
their own, and what trainwatch makes of them; see trainwatch/demo/run.py."""

from trainwatch.demo.run import DemoError, DemoResult, run

__all__ = ["DemoError", "DemoResult", "run"]
