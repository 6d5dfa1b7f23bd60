"""What `trainwatch report` (and anything else above diagnose) reads of it: the one public
entry to diagnose's figures and decisions. tests/test_import_boundaries.py holds report to it,
so a change inside diagnose shows here, in one list, when it reaches the report."""

from __future__ import annotations

from trainwatch.diagnose import baseline, compare, render, rulesource
from trainwatch.diagnose.compare import Comparison, compare_refs, parse_reference
from trainwatch.diagnose.deployed import Deployment
from trainwatch.diagnose.figures import RankReport, UnknownTrial
from trainwatch.diagnose.history import HOW, gather_runs, unknown_message
from trainwatch.diagnose.runs import RUNNING, Run, find_runs, latest_per_rank, retention
from trainwatch.diagnose.servers import holding
from trainwatch.diagnose.traces import TraceSummary, step_range

__all__ = ["HOW", "RUNNING", "Comparison", "Deployment", "RankReport", "Run", "TraceSummary",
           "UnknownTrial", "baseline", "compare", "compare_refs", "find_runs", "gather_runs",
           "holding", "latest_per_rank", "parse_reference", "render", "retention", "rulesource",
           "step_range", "unknown_message"]
