"""The operator's side of trainwatch: the `trainwatch` command (`stack`, `diagnose`, `trials`,
`compare`, `report`, `gc`), the demo, and the contract (``trainwatch.contract``) that the rules,
the dashboards and the command share.

A training script never imports this package (it imports ``trial_instrumentation`` alone);
this package reads Prometheus's HTTP API and may use ``trial_instrumentation``'s names, never
the exporter (docs/design.md, import boundaries).
"""
