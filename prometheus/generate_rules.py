"""Render prometheus/rules/*.yml from prometheus/thresholds.yaml (`make rules`).

    python -m prometheus.generate_rules                 # rewrite the committed rule files
    python -m prometheus.generate_rules --check         # exit 1 when they drift
    python -m prometheus.generate_rules --out /tmp/r --for 20s --rate-window 30s
    python -m prometheus.generate_rules --out /tmp/r --runbook-url http://127.0.0.1:10919/runbooks

The last form is how the live test shortens every `for` and the rate window: the same
thresholds, the same generator, written elsewhere.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from prometheus.rulegen import SettingsError, load_settings, render_files
from prometheus.rulegen.settings import DEFAULT_THRESHOLDS

RULES_DIR = Path(__file__).resolve().parent / "rules"


def render(thresholds: Path = DEFAULT_THRESHOLDS, *, for_: str | None = None,
           rate_window: str | None = None, stale_after: float | None = None,
           window: str | None = None, runbook_url: str | None = None) -> dict[str, str]:
    """File name -> text of every rule file, with optional overrides of `for`, the rate window,
    the seconds after which a trial that stopped pushing is stale, the alerts' own windows and
    the runbook's URL."""
    settings = load_settings(thresholds).with_overrides(
        for_=for_, rate_window=rate_window, stale_after=stale_after, window=window,
        runbook_url=runbook_url)
    note = ", ".join(f"{k}={v}" for k, v in (("for", for_), ("rate_window", rate_window),
                                             ("stale_after", stale_after),
                                             ("window", window),
                                             ("runbook_url", runbook_url)) if v)
    return render_files(settings, overrides=note)


def write_rules(out_dir: Path = RULES_DIR, thresholds: Path = DEFAULT_THRESHOLDS, *,
                for_: str | None = None, rate_window: str | None = None,
                stale_after: float | None = None, window: str | None = None,
                runbook_url: str | None = None) -> list[Path]:
    """Render and write the rule files into ``out_dir``; returns the paths written."""
    out_dir.mkdir(parents=True, exist_ok=True)
    written = []
    for name, text in render(thresholds, for_=for_, rate_window=rate_window,
                             stale_after=stale_after, window=window,
                             runbook_url=runbook_url).items():
        path = out_dir / name
        path.write_text(text)
        written.append(path)
    return written


def drift(out_dir: Path = RULES_DIR, thresholds: Path = DEFAULT_THRESHOLDS) -> list[str]:
    """Names of files in ``out_dir`` that differ from a fresh render (missing or extra too)."""
    fresh = render(thresholds)
    on_disk = {p.name: p.read_text() for p in sorted(out_dir.glob("*.yml"))}
    return sorted(name for name in set(fresh) | set(on_disk) if fresh.get(name) != on_disk.get(name))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--thresholds", type=Path, default=DEFAULT_THRESHOLDS)
    parser.add_argument("--out", type=Path, default=RULES_DIR, help="directory to write into")
    parser.add_argument("--for", dest="for_", help="override every alert's `for` (e.g. 20s)")
    parser.add_argument("--rate-window", help="override rate_window (e.g. 30s)")
    parser.add_argument("--stale-after", type=float,
                        help="override TrainwatchTrialStale's threshold (seconds)")
    parser.add_argument("--runbook-url", help="override runbook_url: where alerts link to "
                        "docs/runbooks.md (e.g. file:///srv/trainwatch/docs/runbooks.md)")
    parser.add_argument("--check", action="store_true", help="exit 1 if --out drifted")
    args = parser.parse_args(argv)
    try:
        if args.check:
            stale = drift(args.out, args.thresholds)
            for name in stale:
                print(f"{args.out / name} differs from a fresh render: run `make rules`")
            return 1 if stale else 0
        for path in write_rules(args.out, args.thresholds, for_=args.for_,
                                rate_window=args.rate_window, stale_after=args.stale_after,
                                runbook_url=args.runbook_url):
            print(f"wrote {path}")
    except SettingsError as err:
        print(f"error: {err}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
