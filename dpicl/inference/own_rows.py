"""Greedy decoding of several private prompts together, without letting them mix (privacy invariant 10).

One decoding step of one prompt is a matrix-vector product per weight matrix: on a CPU it reads all the weights
from memory for a single row. Decoding a group of B prompts together reads them once for B rows. The rows must
still not depend on each other, to the bit:

* each prompt is prefilled alone, in its own shape, as on the one-at-a-time path;
* a decoding step's matrix products have the shape (B, width). B is the group's size, a public quantity: groups are
  consecutive prompts of the call, in input order, so only the call's length (and the settings) set them
  (`row_groups`). A row of a product of fixed shape is computed from that row alone (the same operations in the
  same order, whatever the other rows hold);
* attention is the one place where the padding would enter (the group's KV cache is left-padded to its longest
  prompt, a private length), so it runs row by row over that row's own positions only (`own_rows_attention`);
* a row that has finished keeps being fed (its later tokens are dropped), so the shape stays (B, width) until the
  whole group is done; its attention is no longer computed (zeros in its place: no other row reads it).

The KV cache of the decoding steps grows in place (`kv_cache.GrowingLayer`): the same values as a copy per step.
Calls whose rows may depend on each other (public prompts, or batch invariance turned off: `rows_may_mix`) attend
in one padded product per layer instead, drop their finished rows from the steps, and may prefill their prompts'
shared beginnings once (`prefix_tree`).

So a prompt's tokens are a function of its own prompt, its place in its group and the group's size.
`tests/inference/test_own_rows.py` checks this bit for bit, and that padded attention would break it.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from contextvars import ContextVar

import torch
import torch.nn.functional as F
from transformers import AttentionInterface, DynamicCache
from transformers.integrations.sdpa_attention import sdpa_attention_forward
from transformers.masking_utils import AttentionMaskInterface, sdpa_mask

from dpicl.inference.kv_cache import GrowingLayer, growing_cache, with_cache
from dpicl.inference.prefix_tree import greedy_token, prefill_tree

# The attention implementation a model is loaded with when it decodes groups (`HFBackend(decode_rows > 1)`).
OWN_ROWS = "dpicl_own_rows"

# Set while a call's rows may depend on each other (public prompts, or batch invariance turned off): their decoding
# steps then attend as transformers' SDPA does, in one padded product per layer, instead of row by row.
_ROWS_MAY_MIX: ContextVar[bool] = ContextVar("dpicl_rows_may_mix", default=False)

# Set by `decode_group` for each decoding step: the rows already done, whose attention is not computed.
_FINISHED_ROWS: ContextVar[tuple[bool, ...]] = ContextVar("dpicl_finished_rows", default=())


@contextmanager
def rows_may_mix(allowed: bool = True) -> Iterator[None]:
    """Within it (in this thread), `own_rows_attention` may let a batch's rows share their padded products."""
    token = _ROWS_MAY_MIX.set(allowed)
    try:
        yield
    finally:
        _ROWS_MAY_MIX.reset(token)


def own_rows_attention(module, query, key, value, attention_mask, **kwargs):
    """PyTorch's SDPA, except in a decoding step (one new token per row) of several rows that must not mix: then
    each row attends over its own positions only, as if it were alone (the padding positions are never read)."""
    batch, heads, q_length, dim = query.shape
    if q_length != 1 or batch == 1 or _ROWS_MAY_MIX.get():  # one padded product for rows that may mix
        return sdpa_attention_forward(module, query, key, value, attention_mask, **kwargs)
    if kwargs.get("softcap") or kwargs.get("s_aux") is not None:
        raise ValueError("decode_rows > 1 does not support attention logit soft-capping or attention sinks (this "
                         "model uses one): set model.decode_rows: 1")
    kv_heads = key.shape[1]
    scaling = kwargs.get("scaling") or dim ** -0.5
    # grouped-query attention: query head h reads KV head h // (heads / kv_heads), as transformers' repeat_kv
    queries = query[:, :, 0].reshape(batch, kv_heads, heads // kv_heads, dim)
    starts = own_starts(attention_mask, batch, key.shape[2])
    finished = _FINISHED_ROWS.get()
    outputs = []
    for row, start in enumerate(starts):
        if finished and finished[row]:  # its later tokens are dropped; the others' attention does not read it
            outputs.append(queries.new_zeros(queries.shape[1:], dtype=torch.float32))
            continue
        # in float32: PyTorch's CPU attention products for one query row are 3x slower in bfloat16 (the demo);
        # three plain operations, not SDPA: a row's call costs 57 % of SDPA's (benchmarked with 40 rows)
        keys, values = key[row, :, start:].float(), value[row, :, start:].float()
        weights = torch.bmm(queries[row].float(), keys.transpose(1, 2)).mul_(scaling).softmax(-1)
        outputs.append(torch.bmm(weights, values))
    return torch.stack(outputs).reshape(batch, 1, heads, dim).to(query.dtype), None


def own_starts(attention_mask: torch.Tensor | None, batch: int, length: int) -> list[int]:
    """Where each row's own positions start in a decoding step's KV cache: after its left padding, which
    `sdpa_mask`'s boolean mask (batch, 1, 1, length) marks False (None: no row is padded)."""
    if attention_mask is None:
        return [0] * batch
    if attention_mask.dtype != torch.bool:
        raise TypeError(f"own-rows attention expects sdpa_mask's boolean mask, got {attention_mask.dtype}")
    own = attention_mask[:, 0, 0]
    starts = (~own).sum(-1)
    if not torch.equal(own, torch.arange(length, device=own.device) >= starts[:, None]):
        raise ValueError("own-rows attention expects each row's positions after its left padding, to the end")
    return starts.tolist()


AttentionInterface.register(OWN_ROWS, own_rows_attention)
AttentionMaskInterface.register(OWN_ROWS, sdpa_mask)


def row_groups(prompts: int, rows: int, workers: int) -> list[range]:
    """The groups a call of `prompts` prompts decodes in: consecutive prompts in input order, at most `rows` each,
    their sizes within one of each other, and as many groups for every worker thread where there are prompts
    enough (a fifth group of five would keep one thread busy alone while the other waits). A function of the call's
    length and the settings alone: public."""
    needed = -(-prompts // rows)
    count = min(-(-needed // workers) * workers, prompts)  # `needed` rounded up to a multiple of `workers`
    size, larger = divmod(prompts, count) if count else (0, 0)
    bounds = [0]
    for group in range(count):
        bounds.append(bounds[-1] + size + (group < larger))
    return [range(start, end) for start, end in zip(bounds, bounds[1:])]


def stacked_cache(config, caches: Sequence[DynamicCache]) -> tuple[DynamicCache, torch.Tensor]:
    """One left-padded KV cache of the prompts' own caches (each from a prefill alone), and its attention mask
    (rows, longest), 1 on each row's own positions."""
    lengths = [cache.get_seq_length() for cache in caches]
    longest = max(lengths)
    stacked = growing_cache(config)
    for layer, target in enumerate(stacked.layers):
        parts = [(c.layers[layer].keys, c.layers[layer].values) for c in caches]
        if isinstance(target, GrowingLayer):  # each row copied once, straight into the room decoding grows into
            target.fill([k for k, _ in parts], [v for _, v in parts], longest)
            continue
        keys = torch.cat([F.pad(k, (0, 0, longest - n, 0)) for (k, _), n in zip(parts, lengths)])
        values = torch.cat([F.pad(v, (0, 0, longest - n, 0)) for (_, v), n in zip(parts, lengths)])
        stacked.update(keys, values, layer)
    mask = torch.zeros(len(caches), longest, dtype=torch.long, device=stacked.layers[0].keys.device)
    for row, n in enumerate(lengths):
        mask[row, longest - n:] = 1
    return stacked, mask


def prefill_alone(model, ids: Sequence[Sequence[int]],
                  banned: Sequence[int] = ()) -> tuple[list[DynamicCache], list[int]]:
    """Each prompt's KV cache and greedy next token (not one of `banned`), each prompt prefilled alone in its own
    shape."""
    caches, tokens = [], []
    for row in ids:
        cache = DynamicCache(config=model.config)
        out = model(input_ids=torch.tensor([list(row)], device=model.device), **with_cache(model, cache),
                    use_cache=True, logits_to_keep=1)
        caches.append(cache)
        tokens.append(greedy_token(out.logits[0, -1], banned))
    return caches, tokens


def decode_group(model, ids: Sequence[Sequence[int]], max_new_tokens: int,
                 done: Callable[[list[int]], bool], shared_prefixes: bool = False,
                 banned: Callable[[list[int]], Sequence[int]] = lambda tokens: ()) -> list[list[int]]:
    """Each prompt's greedy tokens: prefilled alone (or, `shared_prefixes`, each beginning that prompts share
    prefilled once: `prefix_tree`, for rows that may mix only), then decoded together with the others of the group,
    until `done(tokens)` (EOS, a stop string) or `max_new_tokens`; a row's next token is never one of
    `banned(its tokens so far)` (a function of that row alone). `model` must use `OWN_ROWS` attention."""
    if shared_prefixes and not _ROWS_MAY_MIX.get():
        raise ValueError("shared prefixes make a prompt's results depend on the others: only for rows that may mix")
    device = model.device
    prefill = prefill_tree if shared_prefixes else prefill_alone
    caches, first = prefill(model, ids, banned([]))
    tokens = [[token] for token in first]
    finished = [done(t) for t in tokens]
    if all(finished):
        return tokens
    cache, mask = stacked_cache(model.config, caches)
    del caches
    position = torch.tensor([[len(row)] for row in ids], device=device)
    last = torch.tensor([[t[0]] for t in tokens], device=device)
    active = list(range(len(ids)))  # the prompt of each row of the decoding steps
    for _ in range(max_new_tokens - 1):
        if all(finished):
            break
        unfinished = [r for r, prompt in enumerate(active) if not finished[prompt]]
        # rows that may mix: the finished ones leave once they are a quarter (copying the cache costs a step)
        if _ROWS_MAY_MIX.get() and len(unfinished) <= 0.75 * len(active):
            index = torch.tensor(unfinished, device=device)
            cache.batch_select_indices(index)
            mask, position, last = mask[index], position[index], last[index]
            active = [active[r] for r in unfinished]
        mask = torch.cat([mask, mask.new_ones((len(active), 1))], dim=-1)
        step = _FINISHED_ROWS.set(tuple(finished[prompt] for prompt in active))
        try:
            out = model(input_ids=last, attention_mask=mask, position_ids=position, **with_cache(model, cache),
                        use_cache=True, logits_to_keep=1)
        finally:
            _FINISHED_ROWS.reset(step)
        logits = out.logits[:, -1]
        for row, prompt in enumerate(active):  # each row's own exclusions, from its own tokens
            if not finished[prompt] and (excluded := banned(tokens[prompt])):
                logits[row, list(excluded)] = float("-inf")
        last = logits.argmax(-1, keepdim=True)
        position = position + 1
        for prompt, token in zip(active, last[:, 0].tolist()):
            if not finished[prompt]:
                tokens[prompt].append(token)
                finished[prompt] = done(tokens[prompt])
    return tokens
