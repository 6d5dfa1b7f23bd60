"""Write helm/trainwatch/generated/auto-instrumentation.json: the names the chart's admission policy
(``autoInstrumentation``, templates/auto-instrumentation.yaml) gives training pods, read from
trial_instrumentation itself so that the chart and the library cannot disagree.

    python3 -m helm.auto_instrumentation          # write (make chart-files runs it)
    python3 -m helm.auto_instrumentation --check  # exit 1 when the chart's copy differs
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

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
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--check", action="store_true", help="report drift, write nothing")
    args = parser.parse_args(argv)
    wanted = rendered()
    current = FILE.read_text() if FILE.exists() else ""
    if args.check:
        if current != wanted:
            print(f"{FILE}: differs from trial_instrumentation; run helm/auto_instrumentation.py")
            return 1
        return 0
    FILE.write_text(wanted)
    return 0


if __name__ == "__main__":
    sys.exit(main())
