"""The keyword a transformers model takes its KV cache by: `cache` from transformers 5.24 on (where
`past_key_values` is deprecated, to be removed in 5.40), `past_key_values` before (the GPU machines' 5.17)."""

from __future__ import annotations

import functools
import inspect


@functools.cache
def _keyword(model_class: type) -> str:
    return "cache" if "cache" in inspect.signature(model_class.forward).parameters else "past_key_values"


def with_cache(model, cache) -> dict:
    """`{keyword: cache}` for `model(...)` and `model.generate(...)`."""
    return {_keyword(type(model)): cache}
