"""`trainwatch stack`: the whole trainwatch stack as background processes on loopback.

    trainwatch stack up [--for 20s --rate-window 30s]   # start (or reload) and print the URLs
    trainwatch stack status                            # processes, scrape targets, Alertmanager
    trainwatch stack down                              # stop them all; data and logs stay
    trainwatch stack notifications                     # what its webhook receiver was sent

Modules: ``settings`` (ports, overrides), ``configs`` (files derived from the project's),
``services`` (command lines), ``inventory`` (what runs), ``health`` (readiness and Prometheus's
view), ``up``, ``commands`` (status, down, notifications), ``gc_loop`` (the gc process) and
``cli``. Below this package, so that gc, the webhook and the other commands need not import it:
``trainwatch.layout`` (state directory, the checkout's files), ``trainwatch.procs`` (start,
recognise, stop), ``trainwatch.lookup`` (the running stack's Prometheus or other service, for
the other commands) and ``trainwatch.runbooks`` (the page the webhook serves).
"""

from trainwatch.layout import StackError, StateDir
from trainwatch.lookup import ENV_PROMETHEUS, NoPrometheus, prometheus_url

__all__ = ["ENV_PROMETHEUS", "NoPrometheus", "StackError", "StateDir", "prometheus_url"]
