# syntax=docker/dockerfile:1
# GPU worker image: CUDA torch + the project (Prefect, MLflow, boto3, transformers, TRL) in
# /opt/selfplay, and vLLM in its OWN venv /opt/vllm in the same image.
#
# Why two venvs: every recent vllm pins fastapi<0.137 while prefect 3.9 needs fastapi>=0.139,
# and vllm also pins its own torch and transformers. So vLLM runs as a separate process started
# by `selfplay vllm-serve` from $SELFPLAY_VLLM_VENV (= /opt/vllm here, made by
# infra/vllm/make_venv.sh) and the pipeline talks to it over HTTP/NCCL; nothing imports vllm
# from /opt/selfplay.
#
#   docker build -t selfplay-gpu:latest .                                   # CUDA (default)
#   docker build -t selfplay-worker:cpu --build-arg BASE_IMAGE=ubuntu:24.04 \
#       --build-arg TORCH_INDEX_URL=https://download.pytorch.org/whl/cpu \
#       --build-arg INSTALL_VLLM=0 .                                        # CPU, no vLLM
#
# Run as a Prefect worker (default CMD) or as a flow-run container started by a Docker/Kubernetes
# work pool (infra/work-pools/*.json set the command). The storage spool lives in
# /var/lib/selfplay/spool: mount a volume there so uploads waiting for S3 outlive the container.
ARG BASE_IMAGE=nvidia/cuda:12.8.1-cudnn-runtime-ubuntu24.04
FROM ${BASE_IMAGE}

ARG TORCH_VERSION=2.13.0
ARG TORCH_INDEX_URL=https://download.pytorch.org/whl/cu128
ARG INSTALL_VLLM=1

ENV DEBIAN_FRONTEND=noninteractive \
    PYTHONUNBUFFERED=1 \
    PIP_NO_CACHE_DIR=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1 \
    LANG=C.UTF-8

# bubblewrap: the executor's sandbox; tini: reaps vLLM/executor children, forwards signals.
RUN apt-get update \
 && apt-get install -y --no-install-recommends python3 python3-venv python3-dev build-essential \
        git ca-certificates bubblewrap tini \
 && rm -rf /var/lib/apt/lists/*

# vLLM in its own environment, first: it is the slowest layer and changes least. The same
# script a user runs by hand (infra/vllm/make_venv.sh) pins the versions TRL's client supports.
COPY infra/vllm/make_venv.sh /tmp/make_vllm_venv.sh
RUN if [ "$INSTALL_VLLM" = "1" ]; then PYTHON=python3 sh /tmp/make_vllm_venv.sh /opt/vllm; fi \
 && rm /tmp/make_vllm_venv.sh

# The project's environment: torch from the chosen wheel index first, so the dependencies below
# find it and never swap it for another build.
RUN python3 -m venv /opt/selfplay \
 && /opt/selfplay/bin/pip install --index-url "${TORCH_INDEX_URL}" "torch==${TORCH_VERSION}"
ENV PATH=/opt/selfplay/bin:$PATH VIRTUAL_ENV=/opt/selfplay

# Dependencies from pyproject alone (cached until pyproject changes), then the code.
COPY pyproject.toml /src/pyproject.toml
RUN python -c "import tomllib; p = tomllib.load(open('/src/pyproject.toml', 'rb'))['project']; \
print('\n'.join(p['dependencies'] + p['optional-dependencies']['trl']))" > /tmp/requirements.txt \
 && pip install -r /tmp/requirements.txt \
 && rm /tmp/requirements.txt
COPY . /src
RUN pip install --no-deps /src \
 && python -c "import selfplay_core.storage, prefect, mlflow; print('selfplay ok')" \
 && ! python -c "import vllm" 2>/dev/null

ENV SELFPLAY_SPOOL_DIR=/var/lib/selfplay/spool \
    SELFPLAY_VLLM_VENV=/opt/vllm \
    HF_HOME=/root/.cache/huggingface \
    DO_NOT_TRACK=true \
    PREFECT_SERVER_ANALYTICS_ENABLED=false \
    MLFLOW_ENABLE_TELEMETRY=false
RUN mkdir -p /var/lib/selfplay/spool
WORKDIR /src
ENTRYPOINT ["/usr/bin/tini", "--"]
CMD ["prefect", "worker", "start", "--pool", "selfplay-gpu", "--type", "process"]
