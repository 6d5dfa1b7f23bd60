"""trainwatch's Grafana dashboards, generated from code by ``grafana/generate.py``.

The generated JSON is committed under ``grafana/dashboards/`` and provisioned by the files in
``grafana/provisioning/``; ``make dashboards`` regenerates it and a test fails when it drifts.
"""

import sys
from pathlib import Path

# thresholds.yaml's parser, the recording-rule names and the PromQL helpers live in the rule
# generator (prometheus/rulegen); the dashboards import them instead of keeping copies.
_PROMETHEUS_DIR = str(Path(__file__).resolve().parent.parent / "prometheus")
if _PROMETHEUS_DIR not in sys.path:
    sys.path.append(_PROMETHEUS_DIR)
