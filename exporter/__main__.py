"""``python -m exporter``: the same as ``trainwatch-exporter``."""

from exporter.cli import main

raise SystemExit(main())
