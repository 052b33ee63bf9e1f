#!/bin/sh
# Create the separate vLLM environment that `selfplay vllm-serve` starts the server from.
# vLLM pins its own torch/transformers/fastapi and cannot share the pipeline's (Prefect) venv.
# TRL 1.16 (the NCCL weight-sync client) supports vllm 0.22-0.31.
# Usage: infra/vllm/make_venv.sh [VENV_DIR]   then: export SELFPLAY_VLLM_VENV=VENV_DIR
set -eu
VENV="${1:-${SELFPLAY_VLLM_VENV:-$HOME/.venvs/selfplay-vllm}}"
PYTHON="${PYTHON:-python3}"
"$PYTHON" -m venv "$VENV"
"$VENV/bin/pip" install --upgrade pip
"$VENV/bin/pip" install "vllm>=0.22,<0.32"
"$VENV/bin/python" -c "import vllm; print('vllm', vllm.__version__, 'in', '$VENV')"
echo "export SELFPLAY_VLLM_VENV=$VENV"
