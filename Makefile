# Two commands on a fresh machine: `make run` (the main job) and `make test` (the suite).
# Both create or update the virtual environment they need; re-running them is cheap.
PYTHON     ?= python3
VENV       ?= .venv
# A CPU build of torch on machines without a GPU; override, e.g. TORCH_SPEC='torch==2.13.0'
# with PIP_INDEX_URL pointing at a CUDA wheel index, for GPU machines.
TORCH_SPEC ?= torch==2.13.0
PY         := $(VENV)/bin/python
STAMP      := $(VENV)/.selfplay-installed

.PHONY: venv run test test-fast bench up deploy clean

$(STAMP): pyproject.toml
	@test -x $(PY) || $(PYTHON) -m venv $(VENV)
	@$(PY) -c "import torch" 2>/dev/null || $(PY) -m pip install -q "$(TORCH_SPEC)"
	$(PY) -m pip install -q -e ".[dev]"
	@touch $@

venv: $(STAMP)

run: $(STAMP)
	$(VENV)/bin/selfplay run --config configs/tiny-cpu.yaml

test: $(STAMP)
	$(PY) -m pytest

test-fast: $(STAMP)
	$(PY) -m pytest -m "not slow"

# A local Prefect server + worker, MLflow and S3 (Ceph RGW when installed) to click through;
# registers the deployments of prefect.yaml. Ctrl-C stops everything.
up: $(STAMP)
	$(VENV)/bin/selfplay serve

# Register the deployments with the Prefect server at $$PREFECT_API_URL.
deploy: $(STAMP)
	$(VENV)/bin/selfplay deploy

bench: $(STAMP)
	$(PY) benchmarks/executor_throughput.py

clean:
	rm -rf $(VENV) out .pytest_cache
