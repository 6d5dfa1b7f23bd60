"""`trainwatch diagnose` and `trainwatch trials`: why a trial is slow, from Prometheus alone.

Not imported by ``import trial_instrumentation``: the training hot path never loads it. The CLI
reads only Prometheus's HTTP API (stdlib HTTP): the recording rules, the loaded alerting rules
(their ``threshold`` and ``remedy`` annotations) and the pending/firing alerts.
"""
