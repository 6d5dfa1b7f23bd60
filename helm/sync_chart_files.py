"""Copy the rule files, dashboards, Grafana provisioning and Alertmanager config into the chart.

Helm's ``.Files.Get`` cannot read outside the chart directory, so the chart keeps byte-for-byte
copies under ``helm/trainwatch/files/``; ``tests/test_helm.py`` fails when they drift. Run this
after ``make rules`` or ``make dashboards``:

    python3 helm/sync_chart_files.py          # copy, removing copies whose source is gone
    python3 helm/sync_chart_files.py --check  # exit 1 and name the files that differ
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
CHART_FILES = REPO / "helm" / "trainwatch" / "files"
# chart folder (under files/) -> (source folder, file pattern); the one list of what is copied.
SOURCES: dict[str, tuple[Path, str]] = {
    "rules": (REPO / "prometheus" / "rules", "*.yml"),
    "dashboards": (REPO / "grafana" / "dashboards", "*.json"),
    "grafana/provisioning/dashboards": (REPO / "grafana" / "provisioning" / "dashboards", "*.yaml"),
    "grafana/provisioning/datasources": (REPO / "grafana" / "provisioning" / "datasources",
                                         "*.yaml"),
    "alertmanager": (REPO / "prometheus" / "alertmanager", "alertmanager.yml"),
    "alertmanager/templates": (REPO / "prometheus" / "alertmanager" / "templates", "*.tmpl"),
}


def expected() -> dict[Path, bytes]:
    """Every file the chart should carry (path under files/) -> its bytes at the source."""
    wanted: dict[Path, bytes] = {}
    for folder, (source, pattern) in SOURCES.items():
        for path in sorted(source.glob(pattern)):
            wanted[Path(folder) / path.name] = path.read_bytes()
    return wanted


def drift(chart_files: Path | None = None) -> list[str]:
    """Files under ``chart_files`` (the chart's files/) that are missing, differ from their
    source, or have none."""
    chart_files = CHART_FILES if chart_files is None else chart_files
    wanted = expected()
    present = {p.relative_to(chart_files) for p in chart_files.rglob("*") if p.is_file()}
    problems = [f"{rel}: missing in the chart" for rel in sorted(wanted.keys() - present)]
    problems += [f"{rel}: differs from its source" for rel in sorted(wanted.keys() & present)
                 if (chart_files / rel).read_bytes() != wanted[rel]]
    problems += [f"{rel}: no source any more" for rel in sorted(present - wanted.keys())]
    return problems


def sync(chart_files: Path | None = None) -> None:
    """Copy what differs or is missing into ``chart_files`` (the chart's files/), and remove
    the copies whose source is gone; a copy already equal is left alone."""
    chart_files = CHART_FILES if chart_files is None else chart_files
    wanted = expected()
    for rel, data in wanted.items():
        target = chart_files / rel
        target.parent.mkdir(parents=True, exist_ok=True)
        if not target.exists() or target.read_bytes() != data:
            target.write_bytes(data)
    for path in chart_files.rglob("*"):
        if path.is_file() and path.relative_to(chart_files) not in wanted:
            path.unlink()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--check", action="store_true", help="only report drift")
    args = parser.parse_args(argv)
    if not args.check:
        sync()
    problems = drift()
    for problem in problems:
        print(f"helm/trainwatch/files/{problem}", file=sys.stderr)
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
