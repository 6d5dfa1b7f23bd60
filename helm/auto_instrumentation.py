"""Write helm/trainwatch/generated/auto-instrumentation.json: the names the chart's admission policy
(``autoInstrumentation``, templates/auto-instrumentation.yaml) gives training pods, read from
trial_instrumentation itself so that the chart and the library cannot disagree.

    python3 -m helm.auto_instrumentation          # write (make chart-files runs it)
    python3 -m helm.auto_instrumentation --check  # exit 1 when the chart's copy differs
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

from helm.generated import write_or_check
from trial_instrumentation import names
from trial_instrumentation.auto import bundle

REPO = Path(__file__).resolve().parent.parent
FILE = REPO / "helm" / "trainwatch" / "generated" / "auto-instrumentation.json"
# Where the init container's emptyDir is mounted in every container of the pod, and where the
# packages are copied under it.
MOUNT_PATH = "/trainwatch"
DEST = MOUNT_PATH + "/python"


def expected() -> dict[str, Any]:
    return {
        "_generated_by": "helm/auto_instrumentation.py from trial_instrumentation; do not edit",
        "volume": "trainwatch-auto",
        "initContainer": "trainwatch-auto",
        "mountPath": MOUNT_PATH,
        "command": ["python3", "-m", bundle.__name__, DEST],
        "pythonpath": ":".join(bundle.pythonpath(DEST)),
        "env": {
            "auto": names.AUTO_ENV,
            "pushgateway": names.ENV_PUSHGATEWAY,
            "namespace": names.ENV_K8S_NAMESPACE,
            "pod": names.ENV_K8S_POD,
            "nodename": names.ENV_NODENAME,
        },
    }


def rendered() -> str:
    return json.dumps(expected(), indent=2) + "\n"


def main(argv: list[str] | None = None) -> int:
    return write_or_check(FILE, rendered(), argv, __doc__.splitlines()[0],
                          "trial_instrumentation; run helm/auto_instrumentation.py")


if __name__ == "__main__":
    sys.exit(main())
