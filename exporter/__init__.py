"""trainwatch node exporter: GPU (NVML) and host (psutil) metrics read at scrape time."""

__version__ = "0.1.0"
