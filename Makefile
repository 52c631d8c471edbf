# pykubelet: `make run` brings up a local node with demo pods, `make test` runs every test.
SHELL := /bin/bash
VENV := .venv
PY := $(VENV)/bin/python
# The interpreter the venv is made with: CPython 3.12 where the machine has one, else python3
# (deploy/find-python.sh says why). A venv made with another version is made again.
PYTHON ?= $(shell deploy/find-python.sh)
PYTHON_VERSION := $(shell $(PYTHON) -c 'import platform; print(platform.python_version())')
INSTALLED := $(VENV)/.installed-py$(PYTHON_VERSION)
PYKUBELET := $(VENV)/bin/pykubelet
ROOT_DIR ?= /var/lib/pykubelet
PYTEST_ARGS ?=
CSI_STUBS := shared/csi/gen/csi_pb2_grpc.py shared/csi/gen/pluginregistration_pb2_grpc.py

.DEFAULT_GOAL := help

.PHONY: help
help: ## Show this help
	@grep -E '^[a-zA-Z_-]+:.*?## ' $(MAKEFILE_LIST) | awk 'BEGIN {FS = ":.*?## "}; {printf "  make %-12s %s\n", $$1, $$2}'

.PHONY: deps
deps: system-deps $(INSTALLED) $(CSI_STUBS) ## Install system packages and Python dependencies (skips what is there)

.PHONY: system-deps
system-deps:
	@deploy/install-deps.sh

$(INSTALLED): pyproject.toml
	@if [ -x $(PY) ] && [ "$$($(PY) -c 'import platform; print(platform.python_version())')" != "$(PYTHON_VERSION)" ]; then \
		echo "deps: $(VENV) was made with another Python; making it again with $(PYTHON) ($(PYTHON_VERSION))"; rm -rf $(VENV); fi
	@test -x $(PY) || { echo "deps: creating $(VENV) with $(PYTHON) ($(PYTHON_VERSION))"; $(PYTHON) -m venv $(VENV); }
	@echo "deps: installing Python packages into $(VENV)"
	@$(PY) -m pip install --disable-pip-version-check -q -e '.[test,build,bench]'
	@touch $@

# CSI and plugin-registration gRPC stubs, generated from protos/ (not committed). The virtual
# include path makes the generated modules import each other as shared.csi.gen.*.
$(CSI_STUBS) &: protos/csi.proto protos/pluginregistration.proto $(INSTALLED)
	@echo "deps: generating CSI stubs from protos/"
	@mkdir -p shared/csi/gen && touch shared/csi/gen/__init__.py
	@$(PY) -m grpc_tools.protoc -Ishared/csi/gen=protos --python_out=. --grpc_python_out=. \
		shared/csi/gen/csi.proto shared/csi/gen/pluginregistration.proto

.PHONY: protos
protos: $(CSI_STUBS) ## Generate the CSI gRPC stubs from protos/

.PHONY: compose-images
compose-images: deps ## Build the image docker-compose.yml runs (Debian base via mmdebstrap, wheels built here)
	@rm -rf build/docker/wheels
	@echo "compose-images: building wheels of pykubelet and its dependencies into build/docker/wheels"
	@$(PY) -m pip wheel -q --no-deps --wheel-dir build/docker/wheels .
	@# The image's Python is Debian bookworm's (3.11), not necessarily the venv's.
	@$(PY) -m pip download -q --only-binary=:all: --python-version 3.11 --dest build/docker/wheels \
		build/docker/wheels/pykubelet-*.whl
	@deploy/docker-base.sh
	docker build -q -f deploy/Dockerfile -t pykubelet:dev .

.PHONY: run
run: deps ## Start a local node running the example static pods (Ctrl-C stops everything)
	$(PYKUBELET) up --root-dir $(ROOT_DIR) --config examples/kubelet-config.yaml --push-demo-images

.PHONY: down
down: ## Stop a node started with `make run`
	@$(PYKUBELET) down --root-dir $(ROOT_DIR)

.PHONY: status
status: ## Show the local node's pods
	@$(PYKUBELET) status --root-dir $(ROOT_DIR)

.PHONY: test
test: deps lint ## Run all tests: lint, the unit tests on every CPU, then every other suite in pyproject.toml's testpaths one test at a time (integration, resilience, security, security_modes, cpu_manager, cluster, pod_churn, bootstrap, multinode, eviction, deploy); the 1.37 control plane is built in the background on a fresh machine. PYTEST_ARGS=... runs what it names instead, in one session
ifeq ($(strip $(PYTEST_ARGS)),)
	$(PY) -m pytest tests/unit -n auto
	$(PY) -m pytest --ignore=tests/unit
else
	$(PY) -m pytest $(PYTEST_ARGS)
endif

.PHONY: lint
lint: deps ## Static checks: ruff on all code, mypy --strict on shared/ and services/
	@echo "lint: ruff"
	@$(PY) -m ruff check --quiet services shared tests bench
	@echo "lint: mypy (strict, shared/ and services/)"
	@$(PY) -m mypy

.PHONY: test-unit
test-unit: deps ## Run only the unit tests, on every CPU (fakes; the tests need no root, installing what is missing does)
	$(PY) -m pytest tests/unit -n auto $(PYTEST_ARGS)

.PHONY: bench
bench: deps kube ## Benchmarks: pod startup vs the raw CRI floor and the kubelet 1.37, probe load (prints a table, saves bench/results/)
	@deploy/build-kube.sh kubelet
	@deploy/build-containerd.sh >/dev/null
	$(PY) -m bench.run $(BENCH_ARGS)

.PHONY: bench-churn
bench-churn: deps kube ## Churn benchmark: 5,000 pods created and deleted in waves of 50 on pykubelet and the kubelet 1.37, what each left behind (BENCH_ARGS="--churn-pods 500" for a shorter run)
	@deploy/build-kube.sh kubelet
	@deploy/build-containerd.sh >/dev/null
	$(PY) -m bench.run --only churn $(BENCH_ARGS)

.PHONY: profile
profile: deps ## Where pykubelet's CPU goes: py-spy on every service of a node running 100 pods (PROFILE_ARGS)
	$(PY) -m bench.profile $(PROFILE_ARGS)

.PHONY: conformance
conformance: deps kube ## Upstream e2e [NodeConformance] specs on pykubelet and the kubelet 1.37, side by side (CONFORMANCE_AGENT=pykubelet|kubelet|both, CONFORMANCE_ARGS)
	@deploy/build-kube.sh kubelet
	@deploy/build-containerd.sh >/dev/null
	@deploy/build-kube.sh e2e
	@deploy/build-busybox.sh >/dev/null
	$(PY) -m tests.conformance.run --agent $(or $(CONFORMANCE_AGENT),both) $(CONFORMANCE_ARGS)

.PHONY: join-baseline
join-baseline: deps kube ## kubeadm join, upgrade node and reset with the kubelet 1.37 (the baseline) and with pykubelet, on containerd 2.x: each step's time side by side
	@deploy/build-kube.sh kubeadm
	@deploy/build-kube.sh kubelet
	@deploy/build-containerd.sh >/dev/null
	$(PY) -m pytest tests/join_baseline -p no:cacheprovider -s $(PYTEST_ARGS)

.PHONY: deps-vm
deps-vm: deps ## Install what the VM tests need: qemu (software emulation), mmdebstrap, e2fsprogs, ssh
	@deploy/install-deps.sh --vm

.PHONY: test-vm
test-vm: deps-vm ## pykubelet on a systemd + cgroup v2 host: a Debian guest under qemu (image built once, cached in /var/cache/pykubelet/vm), beside the kubelet 1.37
	@deploy/build-kube.sh kubelet
	@deploy/build-containerd.sh >/dev/null
	$(PY) -m pytest tests/vm -p no:cacheprovider --timeout 3600 $(PYTEST_ARGS)

.PHONY: kube
kube: ## Build and cache etcd, kube-apiserver/-scheduler/-controller-manager and kubectl 1.37 from the Go module proxy
	@deploy/build-kube.sh

.PHONY: clean
clean: ## Remove the virtualenv and caches
	rm -rf $(VENV) .pytest_cache
	find . -name __pycache__ -type d -prune -exec rm -rf {} +
