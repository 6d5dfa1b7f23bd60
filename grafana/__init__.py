"""trainwatch's Grafana dashboards, generated from code by ``python -m grafana.generate``.

The generated JSON is committed under ``grafana/dashboards/`` and provisioned by the files in
``grafana/provisioning/``; ``make dashboards`` regenerates it and a test fails when it drifts.
thresholds.yaml's parser comes from the rule generator (``prometheus.rulegen``); the names the
rules, the dashboards and ``trainwatch diagnose`` share come from the contract module.
"""
