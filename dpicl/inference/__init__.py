"""LLM backends behind one protocol (`Backend`), chosen by name from config, plus offline model resolution.

Backends load lazily (torch and transformers import only when one is built), so importing this package is cheap.
"""

from __future__ import annotations

from typing import Any

from dpicl.inference.base import Backend, GenerationParams, ModelNotAvailableError, postprocess

BACKENDS = ("hf",)

__all__ = ["BACKENDS", "Backend", "GenerationParams", "ModelNotAvailableError", "load_backend", "postprocess"]


def load_backend(name: str = "hf", **kwargs: Any) -> Backend:
    """Build the backend `name` with its constructor's keyword arguments (e.g. `model`, `device`, `threads`)."""
    if name == "hf":
        from dpicl.inference.hf import HFBackend

        return HFBackend(**kwargs)
    raise ValueError(f"unknown backend {name!r}; available: {', '.join(BACKENDS)}")
