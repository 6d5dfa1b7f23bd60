# trainwatch-exporter: GPU (NVML) and host (psutil) metrics for Prometheus, in a container.
#
#   make image                                   # podman; see the Makefile for the base image
#   docker build -t ghcr.io/trainwatch/trainwatch-exporter:0.1.0 .
#   docker run --gpus all --read-only -p 127.0.0.1:10910:10910 \
#     ghcr.io/trainwatch/trainwatch-exporter:0.1.0
#
# The base is a build argument: users build on a registry's slim Python; a machine without a
# registry builds on a Debian base made from packages (make image-base). Any base with Python
# 3.11+ (tomllib, below) and its venv module works.
ARG BASE_IMAGE=docker.io/library/python:3.12-slim
FROM ${BASE_IMAGE}

# The NVIDIA container toolkit reads these and mounts the driver's NVML library (and nothing
# else: "utility" is nvidia-smi/NVML, no CUDA) into the container. Without NVML the exporter
# serves host metrics, with trainwatch_scrape_collector_success{collector="gpu"} 0.
ENV NVIDIA_VISIBLE_DEVICES=all \
    NVIDIA_DRIVER_CAPABILITIES=utility \
    PATH=/opt/trainwatch/bin:$PATH \
    PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1

# Only the exporter's package and the project's base dependencies (prometheus-client,
# nvidia-ml-py, psutil, pyyaml): no torch, no trial_instrumentation, no operator CLI. A venv, so
# the same steps work on python:*-slim and on Debian's python3. PIP_CERT: the system bundle,
# which a build on a machine behind a TLS-inspecting proxy mounts over (see the Makefile).
# Dependencies first, read from pyproject.toml, in a layer of their own: an edit to the exporter
# rebuilds only the small layer after it.
ENV PIP_CERT=/etc/ssl/certs/ca-certificates.crt \
    PIP_NO_CACHE_DIR=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1
COPY pyproject.toml /tmp/src/
RUN python3 -m venv /opt/trainwatch \
 && python3 -c 'import sys, tomllib; print(*tomllib.load(sys.stdin.buffer)["project"]["dependencies"], sep="\n")' \
      < /tmp/src/pyproject.toml > /tmp/requirements.txt \
 && pip install --quiet -r /tmp/requirements.txt \
 && rm /tmp/requirements.txt
# pyproject names README.md as the long description; the image needs none, and copying it would
# rebuild on every edit of the docs. It also declares the operator's `trainwatch` command, whose
# package is not copied: its script is removed rather than left broken.
COPY exporter /tmp/src/exporter
RUN touch /tmp/src/README.md \
 && pip install --quiet --no-deps /tmp/src \
 && rm -rf /tmp/src /opt/trainwatch/bin/trainwatch \
 && trainwatch-exporter --version

# nobody, as the Helm chart's podSecurityContext (runAsUser 65534). The exporter writes nothing:
# the image runs with a read-only root filesystem and no capabilities.
USER 65534:65534
EXPOSE 10910
# The exporter is PID 1: it handles SIGTERM itself (a clean stop in well under a second).
ENTRYPOINT ["trainwatch-exporter"]
