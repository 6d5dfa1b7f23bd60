"""The chart's generated files: write one, or with ``--check`` say it has drifted (exit 1)."""

from __future__ import annotations

import argparse
from pathlib import Path


def write_or_check(path: Path, wanted: str, argv: list[str] | None, description: str,
                   source: str) -> int:
    """``path`` made ``wanted`` (0); with ``--check`` in ``argv``, 1 and one line naming
    ``source`` (what to run) where it differs, 0 where it does not."""
    parser = argparse.ArgumentParser(description=description)
    parser.add_argument("--check", action="store_true", help="report drift, write nothing")
    if parser.parse_args(argv).check:
        if (path.read_text() if path.exists() else "") != wanted:
            print(f"{path}: differs from {source}")
            return 1
        return 0
    path.write_text(wanted)
    return 0
