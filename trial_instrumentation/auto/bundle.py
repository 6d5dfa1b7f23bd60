"""``python -m trial_instrumentation.auto.bundle DEST``: copy what automatic instrumentation
needs into DEST, for a training image that has no trainwatch installed.

The Helm chart's admission policy (``autoInstrumentation``, helm/README.md) runs this in an
init container of the trainwatch image (operator.Dockerfile) and mounts DEST, an emptyDir, into
the pod's containers; :func:`pythonpath` is what it puts first on their ``PYTHONPATH``. Only
pure-Python packages are copied: ``trial_instrumentation`` (with ``auto/site/sitecustomize.py``)
and ``prometheus_client``, which it pushes with. ``psutil`` (compiled) is not: without it the
loader's CPU and read series are left out, with one warning.
"""

from __future__ import annotations

import importlib.util
import os
import shutil
import sys
from pathlib import Path, PurePosixPath

# The packages copied, in the order their directories are found.
PACKAGES = ("trial_instrumentation", "prometheus_client")
# The directory of the sitecustomize.py that activates TRAINWATCH_AUTO, relative to DEST.
SITE = PurePosixPath("trial_instrumentation", "auto", "site")


def pythonpath(dest: str) -> list[str]:
    """The entries to put first on PYTHONPATH, in order: the auto site dir, then DEST."""
    return [str(PurePosixPath(dest) / SITE), str(PurePosixPath(dest))]


def package_dir(name: str) -> Path:
    spec = importlib.util.find_spec(name)
    if spec is None or not spec.submodule_search_locations:
        raise SystemExit(f"trainwatch: package {name} is not installed here")
    return Path(next(iter(spec.submodule_search_locations)))


def bundle(dest: Path) -> list[Path]:
    """Copy every package of PACKAGES into dest (no bytecode), readable by any user; returns the
    copied package directories."""
    dest.mkdir(parents=True, exist_ok=True)
    copied = []
    for name in PACKAGES:
        target = dest / name
        shutil.rmtree(target, ignore_errors=True)
        shutil.copytree(package_dir(name), target,
                        ignore=shutil.ignore_patterns("__pycache__", "*.pyc"))
        for root, dirs, files in os.walk(target):
            for d in dirs:
                os.chmod(os.path.join(root, d), 0o755)
            for f in files:
                os.chmod(os.path.join(root, f), 0o644)
        copied.append(target)
    return copied


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    if len(args) != 1:
        print("usage: python -m trial_instrumentation.auto.bundle DEST", file=sys.stderr)
        return 2
    for path in bundle(Path(args[0])):
        print(f"trainwatch: copied {path}")
    print("PYTHONPATH=" + ":".join(pythonpath(args[0])))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
