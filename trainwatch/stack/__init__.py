"""`trainwatch stack`: the whole trainwatch stack as background processes on loopback.

    trainwatch stack up [--for 20s --rate-window 30s]   # start (or reload) and print the URLs
    trainwatch stack status                            # processes, scrape targets, Alertmanager
    trainwatch stack down                              # stop them all; data and logs stay
    trainwatch stack notifications                     # what its webhook receiver was sent

Modules: ``layout`` (state directory), ``settings`` (ports, overrides), ``configs`` (files
derived from the project's), ``services`` (command lines), ``procs`` (start, recognise, stop),
``inventory`` (what runs), ``health`` (readiness and Prometheus's view), ``up``,
``commands`` (status, down, notifications), ``gc_loop`` (the gc process), ``cli``, and
``lookup`` (the running stack's Prometheus, for the other commands).
"""

from trainwatch.stack.layout import StackError, StateDir
from trainwatch.stack.lookup import ENV_PROMETHEUS, NoPrometheus, prometheus_url

__all__ = ["ENV_PROMETHEUS", "NoPrometheus", "StackError", "StateDir", "prometheus_url"]
