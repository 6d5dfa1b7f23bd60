# The operator's `trainwatch` command in a container: the Helm chart's gc CronJob runs
# `trainwatch gc` from it. (The exporter's image, Dockerfile, carries only the exporter.)
#
#   podman build -f operator.Dockerfile --build-arg BASE_IMAGE=... -t ghcr.io/trainwatch/trainwatch:0.1.0 .
#
# The operator package and the names it shares with trial_instrumentation, over the project's
# base dependencies; no torch, no exporter.
ARG BASE_IMAGE=docker.io/library/python:3.12-slim
FROM ${BASE_IMAGE}

ENV PATH=/opt/trainwatch/bin:$PATH \
    PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1 \
    PIP_CERT=/etc/ssl/certs/ca-certificates.crt \
    PIP_NO_CACHE_DIR=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1
COPY pyproject.toml /tmp/src/
RUN python3 -m venv /opt/trainwatch \
 && python3 -c 'import sys, tomllib; print(*tomllib.load(sys.stdin.buffer)["project"]["dependencies"], sep="\n")' \
      < /tmp/src/pyproject.toml > /tmp/requirements.txt \
 && pip install --quiet -r /tmp/requirements.txt \
 && rm /tmp/requirements.txt
COPY trainwatch /tmp/src/trainwatch
COPY trial_instrumentation /tmp/src/trial_instrumentation
# The exporter's script is declared by pyproject too; its package is not copied.
RUN touch /tmp/src/README.md \
 && pip install --quiet --no-deps /tmp/src \
 && rm -rf /tmp/src /opt/trainwatch/bin/trainwatch-exporter \
 && trainwatch gc --help >/dev/null

USER 65534:65534
ENTRYPOINT ["trainwatch"]
