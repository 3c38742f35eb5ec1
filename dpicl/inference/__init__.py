"""LLM backends behind one protocol (`Backend`), chosen by name from config, plus offline model resolution.

Backends load lazily (torch and transformers are imported only when one is built), so importing this
package is cheap.
"""

from __future__ import annotations

import os

# Models are never fetched at run time (DESIGN.md): make the Hugging Face libraries fail fast instead of
# trying the network. Set before they are imported; an explicit user setting wins.
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")

from typing import Any  # noqa: E402

from dpicl.inference.base import (  # noqa: E402
    Backend,
    GenerationParams,
    ModelNotAvailableError,
    postprocess,
)

BACKENDS = ("hf",)

__all__ = ["BACKENDS", "Backend", "GenerationParams", "ModelNotAvailableError", "load_backend", "postprocess"]


def load_backend(name: str = "hf", **kwargs: Any) -> Backend:
    """Build the backend `name` with its constructor's keyword arguments (`model`, `device`, ...)."""
    if name == "hf":
        from dpicl.inference.hf import HFBackend

        return HFBackend(**kwargs)
    raise ValueError(f"unknown backend {name!r}; available: {', '.join(BACKENDS)}")
