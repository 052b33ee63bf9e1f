# Two commands on a fresh machine: `make test` (the suite) and `make run` (the main job).
# Each installs what it needs first, then works: the system packages (infra/system-packages.sh:
# bubblewrap; for the tests also Ceph RGW and docker-compose; apt-get as root or through sudo)
# and the virtual environment. Re-running them is cheap.
PYTHON     ?= python3
VENV       ?= .venv
# A CPU build of torch on machines without a GPU; override, e.g. TORCH_SPEC='torch==2.13.0'
# with PIP_INDEX_URL pointing at a CUDA wheel index, for GPU machines.
TORCH_SPEC ?= torch==2.13.0
PY         := $(VENV)/bin/python
STAMP      := $(VENV)/.selfplay-installed
SYSTEM_PACKAGES := PYTHON="$(PYTHON)" VENV="$(VENV)" $(SHELL) infra/system-packages.sh
# `make up`: extra arguments for `selfplay serve`, e.g. UP_ARGS="--no-s3 --mlflow-port 5001".
UP_ARGS    ?=
UP_PID     ?= runs/serve/serve.pid

.PHONY: venv run test test-fast bench up deploy clean system-packages-run system-packages-test

$(STAMP): pyproject.toml
	@test -x $(PY) || { echo "creating $(VENV) with $(PYTHON) ..."; $(PYTHON) -m venv $(VENV); }
	@$(PY) -c "import torch" 2>/dev/null || { \
	    echo "installing $(TORCH_SPEC) first (a CPU build from PyPI, ~750 MB; set TORCH_SPEC for another) ..."; \
	    $(PY) infra/pip_install.py "$(TORCH_SPEC)"; }
	@echo "installing selfplay and its dependencies into $(VENV) (prefect, mlflow, transformers, trl, ...; ~2 GB, several minutes) ..."
	@$(PY) infra/pip_install.py -e ".[dev]"
	@touch $@
	@echo "$(VENV) is ready: '. $(VENV)/bin/activate' puts selfplay, prefect and mlflow on PATH."

venv: $(STAMP)

system-packages-run:
	@$(SYSTEM_PACKAGES) run

system-packages-test:
	@$(SYSTEM_PACKAGES) test

# Prerequisites are made in order: a missing system package stops before the venv's long install.
run: system-packages-run $(STAMP)
	$(VENV)/bin/selfplay run --config configs/tiny-cpu.yaml

test: system-packages-test $(STAMP)
	$(PY) -m pytest

test-fast: system-packages-test $(STAMP)
	$(PY) -m pytest -m "not slow"

# A local Prefect server + worker, MLflow (the store `make run` writes, runs/mlruns) and S3 (Ceph
# RGW when installed) to click through; registers the deployments of prefect.yaml.
# The pid file is this recipe's target on purpose: a SIGINT sent to make's pid alone is not
# passed on by make, which instead deletes the target of the recipe it runs, and `selfplay
# serve --pid-file` stops when its file is gone. Ctrl-C, SIGINT or SIGTERM stops everything.
up: $(UP_PID)
$(UP_PID): $(STAMP) FORCE
	@mkdir -p $(dir $@)
	@exec $(VENV)/bin/selfplay serve --pid-file $@ $(UP_ARGS)
FORCE:
.PHONY: FORCE

# Register the deployments with the Prefect server at $$PREFECT_API_URL.
deploy: $(STAMP)
	$(VENV)/bin/selfplay deploy

bench: $(STAMP)
	$(PY) benchmarks/executor_throughput.py

clean:
	rm -rf $(VENV) out .pytest_cache
