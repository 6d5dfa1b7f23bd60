# trainwatch-exporter: GPU (NVML) and host (psutil) metrics for Prometheus, in a container.
#
#   make image                                   # podman; see the Makefile for the base image
#   docker build -t ghcr.io/trainwatch/trainwatch-exporter:0.1.0 .
#   docker run --gpus all --read-only -p 127.0.0.1:10910:10910 \
#     ghcr.io/trainwatch/trainwatch-exporter:0.1.0
#
# The base is a build argument: users build on a registry's slim Python; a machine without a
# registry builds on a Debian base made from packages (make image-base). Any base with python3
# and its venv module works.
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
# pyproject also declares the operator's `trainwatch` command, whose package is not copied: its
# script is removed rather than left broken.
COPY pyproject.toml README.md /tmp/src/
COPY exporter /tmp/src/exporter
RUN python3 -m venv /opt/trainwatch \
 && PIP_CERT=/etc/ssl/certs/ca-certificates.crt \
    /opt/trainwatch/bin/pip install --no-cache-dir --disable-pip-version-check --quiet /tmp/src \
 && rm -rf /tmp/src /opt/trainwatch/bin/trainwatch \
 && /opt/trainwatch/bin/trainwatch-exporter --version

# nobody, as the Helm chart's podSecurityContext (runAsUser 65534). The exporter writes nothing:
# the image runs with a read-only root filesystem and no capabilities.
USER 65534:65534
EXPOSE 10910
# The exporter is PID 1: it handles SIGTERM itself (a clean stop in well under a second).
ENTRYPOINT ["trainwatch-exporter"]
