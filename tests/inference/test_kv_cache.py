"""`GrowingLayer`: the KV cache of the grouped decoding steps and of padded generation, appended in place."""

import pytest
import torch
from transformers.cache_utils import DynamicLayer

from dpicl.inference.kv_cache import GrowingLayer, growing_cache


def states(batch: int, length: int, seed: int) -> tuple[torch.Tensor, torch.Tensor]:
    generator = torch.Generator().manual_seed(seed)
    return (torch.randn(batch, 3, length, 8, generator=generator),
            torch.randn(batch, 3, length, 4, generator=generator))  # values may be narrower than keys


def test_it_holds_what_a_dynamic_layer_holds_through_every_kind_of_change():
    growing, dynamic = GrowingLayer(), DynamicLayer()
    batch = 4
    for step in range(80):  # a prefill, then single positions past the spare room
        keys, values = states(batch, 30 if step == 0 else 1, step)
        got, want = growing.update(keys, values), dynamic.update(keys, values)
        assert all(torch.equal(g, w) for g, w in zip(got, want)), step
        assert growing.get_seq_length() == dynamic.get_seq_length()
        if step == 40:  # rows dropped (ESA's shared prefill selects rows)
            for layer in (growing, dynamic):
                layer.batch_select_indices(torch.tensor([2, 0]))
            batch = 2
        if step == 60:  # the cache cut back
            for layer in (growing, dynamic):
                layer.crop(-5)
    for layer in (growing, dynamic):
        layer.reset()
    keys, values = states(1, 7, 99)
    assert all(torch.equal(g, w) for g, w in zip(growing.update(keys, values), dynamic.update(keys, values)))


def test_a_decoding_step_writes_into_room_kept_free_instead_of_copying_the_cache():
    layer = GrowingLayer()
    layer.update(*states(2, 50, 0))
    room = layer._room[0].data_ptr()
    for seed in range(1, GrowingLayer.SPARE + 1):
        keys, _ = layer.update(*states(2, 1, seed))
        assert keys.data_ptr() == room  # a view of the same memory: nothing was copied
    layer.update(*states(2, 1, 0))  # the room is full: one copy into a larger one
    assert layer._room[0].data_ptr() != room and layer.get_seq_length() == 50 + GrowingLayer.SPARE + 1


def test_states_of_other_rows_are_refused_not_broadcast():
    layer = GrowingLayer()
    layer.update(*states(1, 5, 0))
    with pytest.raises(ValueError, match="rows of shape"):
        layer.update(*states(3, 1, 1))


def test_a_growing_cache_has_a_growing_layer_for_each_layer(hf_reference):
    cache = growing_cache(hf_reference.model.config)
    assert len(cache.layers) == hf_reference.model.config.num_hidden_layers
    assert all(type(layer) is GrowingLayer for layer in cache.layers)


def test_filled_with_rows_it_holds_their_left_padded_stack_and_grows_in_place():
    rows = [states(1, length, seed) for seed, length in enumerate([5, 9, 1])]
    filled = GrowingLayer()
    filled.fill([k for k, _ in rows], [v for _, v in rows], 9)
    padded = [torch.cat([torch.nn.functional.pad(part[i], (0, 0, 9 - part[i].shape[-2], 0)) for part in rows])
              for i in (0, 1)]
    assert torch.equal(filled.keys, padded[0]) and torch.equal(filled.values, padded[1])
    room = filled._room[0].data_ptr()
    step = states(3, 1, 7)
    keys, values = filled.update(*step)
    assert torch.equal(keys, torch.cat([padded[0], step[0]], dim=-2))
    assert torch.equal(values, torch.cat([padded[1], step[1]], dim=-2))
    assert filled._room[0].data_ptr() == room  # the step went into the room kept free


def test_fill_refuses_parts_of_several_rows():
    keys, values = states(2, 5, 0)
    with pytest.raises(ValueError, match="one row per cache part"):
        GrowingLayer().fill([keys], [values], 5)
