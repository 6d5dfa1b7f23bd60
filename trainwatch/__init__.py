"""The operator's side of trainwatch: the `trainwatch` command (`stack`, `diagnose`, `trials`).

A training script never imports this package (it imports ``trial_instrumentation`` alone);
this package reads Prometheus's HTTP API and may use ``trial_instrumentation``'s names and
remedies, never the exporter.
"""
