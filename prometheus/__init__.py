"""trainwatch's Prometheus side: thresholds.yaml, the rule generator (``prometheus.rulegen``,
run as ``python -m prometheus.generate_rules``), the rendered rules and their promtool tests.

A package of the repository, run from its root at build time; never imported by a training
script, the exporter or the operator CLI.
"""
