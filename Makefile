# gangops — the project's commands. Each target creates/uses .venv and installs
# what it needs, so `make demo` and `make test` work on a fresh machine.
SHELL := /bin/bash
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed-$(shell cat pyproject.toml | sha1sum | cut -c1-12)

.PHONY: venv control-plane helm monitoring-crds demo demo-pr test unit integration lint bench e2e clean

venv: $(STAMP)

# A .venv without a working pip (an interrupted `venv`, or one made before
# python3-venv was installed) is made again rather than failing every target.
$(STAMP): pyproject.toml
	@$(BIN)/python -m pip --version >/dev/null 2>&1 || $(PYTHON) -m venv --clear $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip
	$(BIN)/python -m pip install --quiet -e '.[test,lint,plot]'
	@rm -f $(VENV)/.installed-* && touch $@

# The local control plane (clusters/local), built from Go modules once and cached
# under ~/.cache/gangops: minutes the first time, with progress; instant after.
control-plane: venv
	@$(BIN)/python -m controller.devcluster build >/dev/null

# helm, built from its Go module (tools/helm/go.mod) once and cached under
# ~/.cache/gangops/helm-<version>: minutes the first time; the chart's tests use it.
helm:
	@bash tools/helm/build.sh >/dev/null

# The Prometheus Operator's CRDs, generated from its API types module by controller-gen
# (tools/monitoring-crds/) once and cached under ~/.cache/gangops: the chart's tests
# install them so its monitors and rules meet a real API server.
monitoring-crds:
	@bash tools/monitoring-crds/build.sh >/dev/null

# The main job: gangops running on the local control plane, narrated (scripts/demo.sh).
demo: venv control-plane
	@bash scripts/debian-deps.sh
	@bash scripts/demo.sh

# The offline pull-request workflow: validate, render, plan, simulate (no cluster).
demo-pr: venv
	@bash scripts/demo-pr.sh

test: venv control-plane helm monitoring-crds
	@bash scripts/debian-deps.sh
	@if command -v go >/dev/null; then \
	  (cd clusters/local && GOFLAGS=-mod=readonly go test ./cmd/fake-kubelet/); \
	else echo "go test ./cmd/fake-kubelet/ not run: Go is not installed"; fi
	$(BIN)/pytest tests/unit tests/integration

unit: venv helm
	@bash scripts/debian-deps.sh
	$(BIN)/pytest tests/unit

lint: venv
	$(BIN)/ruff check controller tests
	$(BIN)/ruff format --check controller tests
	$(BIN)/mypy
	$(BIN)/mypy tests/unit/kube/fakes.py tests/unit/reconciler/fake_git.py tests/unit/quota/fake_forge.py
	$(BIN)/lint-imports

bench: venv
	$(BIN)/python -m tests.perf

# End-to-end tests on a kind cluster (clusters/local/kind.yaml); without Docker and
# kind it says they are skipped, and why, and succeeds.
e2e: venv
	@bash clusters/local/e2e.sh

clean:
	rm -rf $(VENV) .pytest_cache .mypy_cache .ruff_cache
