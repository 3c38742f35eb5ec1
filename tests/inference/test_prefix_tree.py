"""`prefix_tree.prefill_tree`: public prompts that share beginnings, each shared run of tokens prefilled once, and
every prompt still ends with the cache and first token it would have had prefilled alone (rounding aside)."""

import pytest
import torch

from dpicl.inference.own_rows import prefill_alone
from dpicl.inference.prefix_tree import prefill_tree, shared_prefix_length
from tests.inference.prompts import LIST, LONG, MEDIUM, SHORT


def test_shared_prefix_length():
    assert shared_prefix_length([[1, 2, 3], [1, 2, 4], [1, 2]]) == 2
    assert shared_prefix_length([[1, 2, 3], [1, 2, 3]]) == 3
    assert shared_prefix_length([[5], [1, 2]]) == 0
    assert shared_prefix_length([[1, 2, 3]]) == 3
    assert shared_prefix_length([[1, 2, 3], [1, 2, 4]], start=1) == 2


def distinct_prefixes(rows) -> int:
    """How many tokens a tree of the rows holds: its distinct non-empty prefixes."""
    return len({tuple(row[:n]) for row in rows for n in range(1, len(row) + 1)})


@pytest.mark.model
def test_each_shared_beginning_is_prefilled_once_and_every_row_gets_its_own_cache(hf_reference, monkeypatch):
    model = hf_reference.model
    opening = LONG + "\n\n"
    # two rows share a long opening, one of them twice over, one row ends where two others go on, one shares nothing
    prompts = [opening + MEDIUM, opening + LIST, opening + MEDIUM, opening, SHORT, opening + LIST + " Pear"]
    rows = hf_reference._encode(prompts)
    fed = []
    forward = model.forward

    def counting(*args, **kwargs):
        fed.append(kwargs["input_ids"].shape[1])
        return forward(*args, **kwargs)

    monkeypatch.setattr(model, "forward", counting)
    with torch.inference_mode():
        caches, tokens = prefill_tree(model, rows)
        assert sum(fed) == distinct_prefixes(rows) < sum(map(len, rows)) * 0.6
        alone_caches, alone_tokens = prefill_alone(model, rows)
    assert tokens == alone_tokens
    for row, cache, alone in zip(rows, caches, alone_caches):
        assert cache.get_seq_length() == len(row)
        for layer, reference in zip(cache.layers, alone.layers):
            torch.testing.assert_close(layer.keys, reference.keys, atol=2e-4, rtol=1e-4)
            torch.testing.assert_close(layer.values, reference.values, atol=2e-4, rtol=1e-4)
    # the duplicate rows' caches are copies, not one object: decoding extends each
    assert caches[0] is not caches[2] and caches[0].layers[0].keys.data_ptr() != caches[2].layers[0].keys.data_ptr()


def test_an_empty_row_is_refused():
    with pytest.raises(ValueError, match="at least one token"):
        prefill_tree(None, [[1, 2], []])
