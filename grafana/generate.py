"""Generate trainwatch's dashboards into grafana/dashboards/ (``make dashboards``).

    python -m grafana.generate            # rewrite the committed JSON
    python -m grafana.generate --out DIR  # write elsewhere (the regeneration test)

Output is deterministic (sorted keys, ids and positions from the layout), so regenerating
with unchanged code and thresholds changes no byte.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Callable
from pathlib import Path

from grafana_foundation_sdk.builders import dashboard as db
from grafana_foundation_sdk.cog.encoder import JSONEncoder

from grafana import fleet, gpu_hours, node_gpu, trial_profile
from grafana.promql import Promql
from prometheus.rulegen.settings import DEFAULT_THRESHOLDS, Settings, SettingsError, load_settings

DASHBOARDS_DIR = Path(__file__).resolve().parent / "dashboards"
# File name (without .json) -> builder; the uid is set by each module.
DASHBOARDS: dict[str, Callable[[Promql], db.Dashboard]] = {
    "node-gpu": node_gpu.build,
    "trial-profile": trial_profile.build,
    "fleet": fleet.build,
    "gpu-hours": gpu_hours.build,
}


def render(settings: Settings | None = None) -> dict[str, str]:
    """File name -> JSON text of every dashboard, from thresholds.yaml unless ``settings``.

    The live test passes the settings it rendered its shortened-window rules with, so the
    recording-rule names in the queries match the rules it loaded.
    """
    q = Promql(settings if settings is not None else load_settings())
    return {f"{name}.json": json.dumps(build(q).build(), cls=JSONEncoder, sort_keys=True,
                                       indent=2, ensure_ascii=False) + "\n"
            for name, build in DASHBOARDS.items()}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=DASHBOARDS_DIR,
                        help="directory to write the JSON into (default: %(default)s)")
    parser.add_argument("--thresholds", type=Path, default=DEFAULT_THRESHOLDS,
                        help="thresholds.yaml to read (default: %(default)s)")
    args = parser.parse_args(argv)
    try:
        files = render(load_settings(args.thresholds))
    except SettingsError as err:
        print(f"generate.py: {err}", file=sys.stderr)
        return 2
    args.out.mkdir(parents=True, exist_ok=True)
    for name, text in files.items():
        (args.out / name).write_text(text, encoding="utf-8")
        print(f"wrote {args.out / name}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
