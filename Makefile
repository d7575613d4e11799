# Sandman's entry points. `make demo` and `make test` are the README's two set-up commands:
# each installs what it needs (apt packages, a project-owned virtualenv) and then runs.
PYTHON ?= python3
VENV   := .venv
BIN    := $(VENV)/bin
STAMP  := $(VENV)/.installed
APT_PACKAGES := bubblewrap busybox-static binutils containerd runc docker-registry gcc libc6-dev
BUNDLE_DIR := build/daemon-bundle

.PHONY: harness-venv demo test lint typecheck imports generate pytest system-deps venv bundle images bench-daemon bench-scheduler bench-simcluster bench-controller bench-controller-burst bench-facade bench-burst bench-faults bench-soak bench-cri simcluster clean

demo: system-deps $(STAMP)
	$(BIN)/sandman-dev demo

test: system-deps $(STAMP) lint typecheck imports pytest

system-deps:
	@missing=""; for p in $(APT_PACKAGES); do \
	  dpkg-query -W -f='$${Status}' $$p 2>/dev/null | grep -q "install ok installed" || missing="$$missing $$p"; \
	done; \
	if [ -n "$$missing" ]; then \
	  echo ">> installing Debian packages:$$missing"; \
	  if [ "$$(id -u)" != 0 ]; then echo "need root (or sudo) to apt-get install:$$missing" >&2; exit 1; fi; \
	  apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq $$missing >/dev/null; \
	fi

venv: $(STAMP)

# Three distributions from one checkout, each editable: the trainer SDK (sdk/), the servers
# (this folder) and the development tools (devtools/: simcluster, devstack, load, test tools).
$(STAMP): pyproject.toml sdk/pyproject.toml devtools/pyproject.toml
	@test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/pip install -q --upgrade pip
	@# setuptools warns that a folder named like the package is in its working directory: by design here.
	PYTHONWARNINGS="ignore:Editable installation" $(BIN)/pip install -q -e ./sdk -e . -e ./devtools
	@touch $@

# The agent harnesses' environment (tests/integrations): a trainer's install of the SDK with
# its harness extras, beside the development venv and not in it: mini-swe-agent pulls in
# litellm, whose boto3 pins python-dateutil<3 where kubernetes 37 needs >=3.
HARNESS_VENV  := .venv-harnesses
HARNESS_STAMP := $(HARNESS_VENV)/.installed
$(HARNESS_STAMP): sdk/pyproject.toml
	@test -x $(HARNESS_VENV)/bin/python || $(PYTHON) -m venv $(HARNESS_VENV)
	$(HARNESS_VENV)/bin/pip install -q --upgrade pip
	PYTHONWARNINGS="ignore:Editable installation" $(HARNESS_VENV)/bin/pip install -q -e './sdk[mini-swe-agent,swe-rex]'
	@touch $@

harness-venv: $(HARNESS_STAMP)

lint: $(STAMP)
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .

typecheck: $(STAMP)
	$(BIN)/mypy

imports: $(STAMP)
	$(BIN)/lint-imports

# Files written from a definition elsewhere (codegen/): the blocking SDK from the async one,
# the create keywords and the guide's table of create fields from the wire model. Run after
# changing either and commit the result; tests/test_generated.py fails while one is stale.
generate: $(STAMP)
	$(BIN)/python -m codegen

# Two workers, one test file per worker at a time (a module's stack fixture is set up once):
# most tests wait on real processes and sockets, so on the 2-core CI machine the suite took
# 643 s with two workers against 984 s serially (2026-12-01, docs/benchmarks/test-suite.md).
PYTEST_WORKERS ?= 2
pytest: $(STAMP) $(HARNESS_STAMP)
	$(BIN)/pytest -n $(PYTEST_WORKERS) --dist loadfile $(PYTEST_ARGS)

bundle: $(STAMP)
	$(BIN)/python -m daemon.sandbox.bundle build --out $(BUNDLE_DIR)

# The container images (images/build.sh: a debootstrap base, buildah, then a smoke test of
# every entry point). Not part of `make test`: a cold build takes minutes (BENCHMARKS.md).
images: APT_PACKAGES += buildah debootstrap
images: system-deps $(STAMP)
	images/build.sh

bench-daemon: system-deps $(STAMP) bundle
	$(BIN)/python -m load.bench.daemon --bundle $(BUNDLE_DIR)

# The real runtime: a private containerd + registry (Debian packages), the cri runtime.
bench-cri: system-deps $(STAMP) bundle
	$(BIN)/python -m load.bench.cri --bundle $(BUNDLE_DIR)

bench-scheduler: $(STAMP)
	$(BIN)/python -m load.bench.scheduler

# The simulated cluster: `make simcluster PROFILE=paper-burst`; Ctrl-C stops it.
PROFILE ?= dev
simcluster: system-deps $(STAMP)
	$(BIN)/python -m simcluster up --profile $(PROFILE)

bench-simcluster: $(STAMP)
	$(BIN)/python -m load.bench.simcluster --repeat 5 --json

bench-controller: $(STAMP)
	$(BIN)/python -m load.bench.controller

bench-controller-burst: $(STAMP)
	$(BIN)/python -m load.bench.controller_burst

bench-facade: $(STAMP)
	$(BIN)/python -m load.bench.facade

# The reference burst (docs/load.md): simcluster paper-burst + controller + facade as separate
# processes; report in build/bench-burst/<time>/. BURST_ARGS="--direct" skips the facade.
BURST_ARGS ?=
bench-burst: $(STAMP)
	$(BIN)/python -m load.burst $(BURST_ARGS)

# Each fault injected into a burst of 2,000 (docs/guarantees.md): lost, duplicated, leaked,
# typed failures, time to detect; a few minutes; report in build/bench-faults/<time>/.
# FAULTS_ARGS="node-delete leader-kill" runs some of them.
FAULTS_ARGS ?=
bench-faults: system-deps $(STAMP)
	$(BIN)/python -m load.faults $(FAULTS_ARGS)

# The soak: 100,000 sandboxes over 30 minutes through the facade on 400 simulated nodes,
# with tool calls on real daemons; report in build/bench-soak/<time>/. SOAK_ARGS="--smoke"
# for a 90 s run; the recorded run (BENCHMARKS.md) is SOAK_ARGS="--sandboxes 50000".
SOAK_ARGS ?=
bench-soak: system-deps $(STAMP)
	$(BIN)/python -m load.soak $(SOAK_ARGS)

clean:
	rm -rf $(VENV) $(HARNESS_VENV) build dist .mypy_cache .ruff_cache *.egg-info sdk/*.egg-info devtools/*.egg-info
