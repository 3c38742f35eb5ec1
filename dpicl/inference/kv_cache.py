"""KV caches for transformers models: the keyword a model takes its cache by, and a cache that grows in place.

`cache` is the keyword from transformers 5.24 on (where `past_key_values` is deprecated, to be removed in 5.40),
`past_key_values` before (the GPU machines' 5.17)."""

from __future__ import annotations

import functools
import inspect

from transformers import DynamicCache
from transformers.cache_utils import DynamicLayer


@functools.cache
def _keyword(model_class: type) -> str:
    return "cache" if "cache" in inspect.signature(model_class.forward).parameters else "past_key_values"


def with_cache(model, cache) -> dict:
    """`{keyword: cache}` for `model(...)` and `model.generate(...)`."""
    return {_keyword(type(model)): cache}


class GrowingLayer(DynamicLayer):
    """A `DynamicLayer` that appends a decoding step's keys and values in place, into room kept free for
    `SPARE` more positions, instead of copying the whole cache (`torch.cat`) at every step (a decoding step of 40
    rows on the CPU: 204 ms instead of 217). It returns views of the same values: what attention computes is
    unchanged."""

    SPARE = 64

    def update(self, key_states, value_states, *args, **kwargs):
        if not self.is_initialized:
            self.lazy_initialization(key_states, value_states)
        length, new = self.get_seq_length(), key_states.shape[-2]
        if length and self.keys.shape[:-2] != key_states.shape[:-2]:  # torch.cat would refuse it too
            raise ValueError(f"the cache holds rows of shape {tuple(self.keys.shape[:-2])}, the new states "
                             f"{tuple(key_states.shape[:-2])}")
        room = getattr(self, "_room", None)
        # new room where there is none, too little, or the views were replaced (cropped, rows selected, reset)
        if room is None or room[0].shape[-2] < length + new or self.keys is not self._views[0] or \
                room[0].shape[:-2] != key_states.shape[:-2]:
            room = tuple(states.new_empty((*states.shape[:-2], length + new + self.SPARE, states.shape[-1]))
                         for states in (key_states, value_states))
            if length:
                room[0][..., :length, :] = self.keys
                room[1][..., :length, :] = self.values
            self._room = room
        room[0][..., length:length + new, :] = key_states
        room[1][..., length:length + new, :] = value_states
        self.keys, self.values = room[0][..., :length + new, :], room[1][..., :length + new, :]
        self._views = (self.keys, self.values)
        return self.keys, self.values

    def fill(self, keys: list[torch.Tensor], values: list[torch.Tensor], length: int) -> None:
        """Start as the rows' caches (each (1, heads, own length, dim)) left-padded with zeros to `length`, with
        room for `SPARE` more positions: the values `torch.cat` of the padded rows would hold, copied once."""
        if any(part.shape[0] != 1 for part in (*keys, *values)):
            raise ValueError("fill takes one row per cache part, of shape (1, heads, length, dim)")
        rows = len(keys)
        room = []
        for parts in (keys, values):
            states = parts[0].new_empty((rows, *parts[0].shape[1:-2], length + self.SPARE, parts[0].shape[-1]))
            states[..., :length, :].zero_()
            for row, part in enumerate(parts):
                states[row, ..., length - part.shape[-2]:length, :] = part[0]
            room.append(states)
        if not self.is_initialized:
            self.lazy_initialization(room[0], room[1])
        self._room = tuple(room)
        self.keys, self.values = room[0][..., :length, :], room[1][..., :length, :]
        self._views = (self.keys, self.values)


def growing_cache(config) -> DynamicCache:
    """A `DynamicCache` for `config` whose full-attention layers are `GrowingLayer`s."""
    cache = DynamicCache(config=config)
    cache.layers = [GrowingLayer() if type(layer) is DynamicLayer else layer for layer in cache.layers]
    return cache
