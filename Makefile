# Two commands on a fresh machine: `make run` (the main job) and `make test` (the suite).
# Both create or update the virtual environment they need; re-running them is cheap.
PYTHON     ?= python3
VENV       ?= .venv
# A CPU build of torch on machines without a GPU; override, e.g. TORCH_SPEC='torch==2.13.0'
# with PIP_INDEX_URL pointing at a CUDA wheel index, for GPU machines.
TORCH_SPEC ?= torch==2.13.0
PY         := $(VENV)/bin/python
STAMP      := $(VENV)/.selfplay-installed

.PHONY: venv run test test-fast bench up deploy clean vllm-venv

$(STAMP): pyproject.toml
	@test -x $(PY) || $(PYTHON) -m venv $(VENV)
	@$(PY) -c "import torch" 2>/dev/null || $(PY) -m pip install -q "$(TORCH_SPEC)"
	$(PY) -m pip install -q -e ".[dev]"
	@touch $@

venv: $(STAMP)

run: $(STAMP)
	@if [ "$(RUN_ENGINE)" = vllm ]; then \
	    venv=$$($(VLLM_VENV_SH) --cpu $(SELFPLAY_VLLM_VENV) | tail -1) && \
	    echo "engine: vLLM (CPU build, $$venv); ENGINE=hf for the transformers engine" && \
	    SELFPLAY_VLLM_VENV=$$venv $(VENV)/bin/selfplay run --config configs/tiny-cpu.yaml $(VLLM_RUN_SETS); \
	else \
	    $(VENV)/bin/selfplay run --config configs/tiny-cpu.yaml; \
	fi

test: $(STAMP) vllm-venv
	SELFPLAY_VLLM_VENV=$(VLLM_TEST_VENV) SELFPLAY_REQUIRE_VLLM=1 $(PY) -m pytest

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
