"""Render trainwatch's Prometheus rule files from prometheus/thresholds.yaml.

Example:
    >>> from prometheus.rulegen import load_settings, render_files
    >>> sorted(render_files(load_settings()))
    ['exporter.yml', 'gpu.yml', 'host.yml', 'recording.yml', 'trial.yml']
"""

from prometheus.rulegen.render import render_files
from prometheus.rulegen.settings import Settings, SettingsError, load_settings

__all__ = ["Settings", "SettingsError", "load_settings", "render_files"]
