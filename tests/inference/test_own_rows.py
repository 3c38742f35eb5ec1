"""`model.decode_rows`: greedy private prompts decoded in groups, each row still a function of its own prompt.

Privacy invariant 10 (docs/PRIVACY.md) at the bit level: the final hidden state of one row at every decoding step
is identical, float for float, whatever the other rows of its group hold (a two-token prompt, a long one). The same
group decoded with plain padded attention does show the dependence, so the check is sensitive; and the grouped
answers are the one-at-a-time answers on these prompts (rounding aside, the same computation).
"""

from contextlib import contextmanager
from dataclasses import replace

import pytest
import torch
from transformers import AttentionInterface
from transformers.integrations.sdpa_attention import sdpa_attention_forward

from dpicl.config import ModelConfig
from dpicl.inference import GenerationParams, backend_options, load_backend
from dpicl.inference import own_rows
from dpicl.inference.kv_cache import GrowingLayer
from dpicl.inference.own_rows import (
    OWN_ROWS,
    decode_group,
    own_rows_attention,
    own_starts,
    row_groups,
)
from dpicl.inference.prefix_tree import prefill_tree
from tests.inference.device import DEVICE
from tests.inference.prompts import LIST, LONG, MEDIUM, SHORT, SILENT

GREEDY = GenerationParams(max_new_tokens=24)
OTHERS = ["Hi", LONG * 2, LONG * 5]  # the middle row of the group: 2, about 140 and about 350 tokens


def others(backend) -> list[str]:
    """The middle rows tried; in bfloat16 without LONG * 5 (slow on CPUs that emulate bfloat16): LONG * 2 already
    shows padded attention's dependence there (test_padded_attention_would_let_the_rows_mix)."""
    return OTHERS if backend.dtype == "float32" else OTHERS[:2]


@pytest.fixture(scope="module")
def grouped():
    backend = load_backend("hf", model="smollm2", device=DEVICE, threads=1, decode_rows=3)
    yield backend
    backend.close()


@pytest.fixture(scope="module")
def grouped_bf16():
    backend = load_backend("hf", model="smollm2", device=DEVICE, dtype="bfloat16", threads=1, decode_rows=3)
    yield backend
    backend.close()


@pytest.fixture(params=["float32", "bfloat16"])
def grouped_any(request, grouped, grouped_bf16):
    """Both dtypes: in bfloat16 the decoding steps' attention runs in float32, the rest does not."""
    return grouped if request.param == "float32" else grouped_bf16


@contextmanager
def decoding_states(backend, group: int):
    """Records the final hidden states of every decoding step of a `group`-row call (one tensor per step)."""
    states: list[torch.Tensor] = []

    def keep(module, args, output):
        if output.shape[0] == group and output.shape[1] == 1:  # a decoding step of the group, not a prefill
            states.append(output[:, 0].clone())

    handle = backend.model.model.norm.register_forward_hook(keep)
    try:
        yield states
    finally:
        handle.remove()


def teacher_states(backend, other: str) -> tuple[list[str], list[bytes]]:
    """The outputs of [MEDIUM, other, LIST] and, per decoding step, the bytes of rows 0 and 2 (the teachers)."""
    with decoding_states(backend, 3) as states:
        outputs = backend.generate([MEDIUM, other, LIST], GREEDY)
    return outputs, [s[[0, 2]].float().cpu().numpy().tobytes() for s in states]  # float(): exact, numpy has no bf16


def common(a: list[bytes], b: list[bytes]) -> tuple[list[bytes], list[bytes]]:
    """Both step lists up to the shorter (a group runs until its longest row is done)."""
    n = min(len(a), len(b))
    return a[:n], b[:n]


@pytest.mark.slow
@pytest.mark.model
def test_a_rows_decoding_does_not_depend_on_the_other_rows(grouped_any, monkeypatch):
    monkeypatch.setattr(GrowingLayer, "SPARE", 5)  # the KV cache's room renewed every few steps, not only once
    outputs, reference = teacher_states(grouped_any, OTHERS[0])
    assert len(reference) >= 10
    for other in others(grouped_any)[1:]:
        got_outputs, got = teacher_states(grouped_any, other)
        assert got_outputs[0::2] == outputs[0::2]
        mine, theirs = common(got, reference)
        assert mine == theirs  # every float of every step


@pytest.mark.slow
@pytest.mark.model
def test_padded_attention_would_let_the_rows_mix(grouped_any, monkeypatch):
    """The counter-example: the same groups with PyTorch's SDPA over the left-padded cache (the padding's length is
    the longest row's, another teacher's) change the teachers' hidden states in their last bits."""
    monkeypatch.setitem(AttentionInterface._global_mapping, OWN_ROWS, sdpa_attention_forward)
    _, reference = teacher_states(grouped_any, OTHERS[0])

    def differs(other: str) -> bool:
        mine, theirs = common(teacher_states(grouped_any, other)[1], reference)
        return mine != theirs

    assert any(differs(other) for other in others(grouped_any)[1:])  # stops at the first that differs


@pytest.mark.slow
@pytest.mark.model
def test_a_finished_rows_skipped_attention_leaves_the_other_rows_bits_alone(grouped_any):
    """A finished row's attention is not computed (zeros): the teachers' states are those of a group whose middle row
    never finishes, float for float, though that row's own states change."""
    def states_when(done) -> list:
        with decoding_states(grouped_any, 3) as states, torch.inference_mode():
            decode_group(grouped_any.model, grouped_any._encode([MEDIUM, LONG, LIST]), 24, done)
        return [s.float().cpu().numpy() for s in states]

    rows: list[list[int]] = []  # each row's token list, in the order decode_group first asks about them

    def middle_row_done_after_three(tokens: list[int]) -> bool:
        if not any(tokens is row for row in rows):
            rows.append(tokens)
        return len(rows) > 1 and tokens is rows[1] and len(tokens) >= 3

    never = states_when(lambda tokens: False)
    early = states_when(middle_row_done_after_three)
    assert len(never) == len(early) >= 10
    assert all((a[[0, 2]] == b[[0, 2]]).all() for a, b in zip(never, early))
    assert any((a[1] != b[1]).any() for a, b in zip(never, early))  # the finished row's attention was skipped


@pytest.mark.slow
@pytest.mark.model
@pytest.mark.parametrize("parallel", [1, 2])
def test_only_public_calls_let_their_rows_mix(grouped, monkeypatch, parallel):
    """A private call's decoding steps attend row by row, on worker threads too; a call of public prompts (no
    private record in any row) attends in one padded product, and the caller's context is left as it was."""
    seen = []

    def spy(module, query, key, value, attention_mask, **kwargs):
        if query.shape[2] == 1 and query.shape[0] > 1:  # a decoding step of several rows
            seen.append(own_rows._ROWS_MAY_MIX.get())
        return own_rows_attention(module, query, key, value, attention_mask, **kwargs)

    monkeypatch.setitem(AttentionInterface._global_mapping, OWN_ROWS, spy)
    monkeypatch.setattr(grouped, "parallel_prompts", parallel)
    prompts = [SHORT, MEDIUM, LIST] * 2
    grouped.generate(prompts, GenerationParams(max_new_tokens=4))
    private, seen[:] = list(seen), []
    grouped.generate(prompts, GenerationParams(max_new_tokens=4, public_prompts=True))
    assert private and not any(private)
    assert seen and all(seen)
    assert not own_rows._ROWS_MAY_MIX.get()


@pytest.mark.slow
@pytest.mark.model
def test_public_answers_with_the_padded_product_are_the_one_at_a_time_answers(grouped, hf_reference):
    prompts = [SHORT, MEDIUM, LIST, LONG]  # one padded batch: the padding must be masked out
    params = GenerationParams(max_new_tokens=16, stop=("\n",))
    assert grouped.generate(prompts, replace(params, public_prompts=True)) == hf_reference.generate(prompts, params)


@pytest.mark.slow
@pytest.mark.model
def test_grouped_answers_are_the_one_at_a_time_answers(grouped, hf_reference):
    prompts = [SHORT, MEDIUM, LIST, LONG]  # two groups of two
    params = GenerationParams(max_new_tokens=16, stop=("\n",))
    assert grouped.generate(prompts, params) == hf_reference.generate(prompts, params)


@pytest.mark.slow
@pytest.mark.model
@pytest.mark.parametrize("public", [False, True])
def test_grouped_rows_do_not_end_blank_and_answer_as_one_at_a_time(grouped, hf_reference, public):
    """The end-of-sequence token masked while a row's answer is blank, from its own tokens: the silent prompt in a
    group answers as alone, and answers nothing when `empty_answers` lets it (the prefill's first token too)."""
    prompts = [SILENT, SHORT, MEDIUM, SILENT]  # two groups of two
    params = GenerationParams(max_new_tokens=12, stop=("\n",), public_prompts=public)
    answers = grouped.generate(prompts, params)
    assert answers == hf_reference.generate(prompts, replace(params, public_prompts=False))
    assert answers[0] and answers[3] == answers[0]
    assert grouped.generate(prompts, replace(params, empty_answers=True))[0::3] == ["", ""]


@pytest.mark.slow
@pytest.mark.model
@pytest.mark.parametrize("public", [False, True])
def test_a_rows_banned_tokens_bind_that_row_alone_at_any_step(grouped, public):
    """`decode_group`'s `banned`, at a later step and after a finished row has left (rows that may mix): the two
    copies of SHORT may not take their third greedy token, the other rows decode as if nothing were banned."""
    ids = grouped._encode([SHORT, MEDIUM, LIST, SHORT])
    with torch.inference_mode():
        medium_first = decode_group(grouped.model, ids[1:2], 1, lambda tokens: False)[0][0]

    def run(banned=lambda tokens: ()) -> list[list[int]]:
        def done(tokens: list[int]) -> bool:  # MEDIUM's row finishes after two tokens
            return len(tokens) >= 2 and tokens[0] == medium_first

        with torch.inference_mode(), own_rows.rows_may_mix(public):
            return decode_group(grouped.model, ids, 6, done, public, banned)

    free = run()
    target = free[0]
    assert free[3] == target and len(free[1]) == 2 and len(target) == 6
    got = run(lambda tokens: (target[2],) if tokens == target[:2] else ())
    assert got[0][:2] == target[:2] and got[0][2] != target[2] and got[3] == got[0]
    assert got[1] == free[1] and got[2] == free[2]


@pytest.mark.slow
@pytest.mark.model
def test_groups_decoded_on_worker_threads_record_no_autograd_history(grouped, monkeypatch):
    """The counter-example: with `parallel_prompts: 2` the groups ran on worker threads, where inference mode (it
    is per thread) was off, so every decoding step kept its autograd graph: `make demo`'s non-private baseline
    grew past 20 GB."""
    seen = []
    decode = grouped._decode_group

    def recording(rows, params, *shared):
        seen.append(torch.is_inference_mode_enabled())
        return decode(rows, params, *shared)

    monkeypatch.setattr(grouped, "_decode_group", recording)
    monkeypatch.setattr(grouped, "parallel_prompts", 2)
    grouped.generate([SHORT, MEDIUM, LIST, SHORT, MEDIUM, LIST], GenerationParams(max_new_tokens=4))
    assert seen == [True, True]


def step_sizes(backend, prompts: list[str], params: GenerationParams) -> list[int]:
    """The number of rows of each decoding step of a one-group call."""
    sizes = []

    def spy(module, query, key, value, attention_mask, **kwargs):
        if query.shape[2] == 1 and module.layer_idx == 0:
            sizes.append(query.shape[0])
        return own_rows_attention(module, query, key, value, attention_mask, **kwargs)

    with pytest.MonkeyPatch.context() as patch:
        patch.setitem(AttentionInterface._global_mapping, OWN_ROWS, spy)
        patch.setattr(backend, "decode_rows", len(prompts))
        backend.generate(prompts, params)
    return sizes


@pytest.mark.slow
@pytest.mark.model
def test_only_public_rows_leave_their_group_when_finished(grouped, hf_reference, monkeypatch):
    """A public call's finished rows stop being computed once they are a quarter of the group (fewer rows per step),
    with the one-at-a-time answers, and its shared beginnings are prefilled once (`prefill_tree`); a private group
    keeps its public shape, however many of its rows are done, and its prompts are prefilled alone."""
    trees = []
    monkeypatch.setattr(own_rows, "prefill_tree",
                        lambda model, rows, banned=(): trees.append(rows) or prefill_tree(model, rows, banned))
    prompts = [SHORT, MEDIUM, LIST, LONG] * 2
    params = GenerationParams(max_new_tokens=20, stop=("\n",))
    private = step_sizes(grouped, prompts, params)
    assert not trees
    public = step_sizes(grouped, prompts, replace(params, public_prompts=True))
    assert len(trees) == 1 and sorted(trees[0]) == sorted(grouped._encode(prompts))
    assert set(private) == {len(prompts)}
    assert public[0] == len(prompts) and public[-1] < len(prompts) and public == sorted(public, reverse=True)
    assert grouped.generate(prompts, replace(params, public_prompts=True)) == hf_reference.generate(prompts, params)


def test_shared_prefixes_are_refused_for_rows_that_must_not_mix():
    with pytest.raises(ValueError, match="only for rows that may mix"):
        decode_group(None, [[1, 2], [1, 3]], 4, lambda tokens: False, shared_prefixes=True)


def test_decode_rows_is_keyed_only_when_set():
    assert "decode_rows" not in ModelConfig().model_dump()  # the keys of existing configs stay
    assert ModelConfig(decode_rows=8).model_dump()["decode_rows"] == 8  # it changes the last bits: keyed
    assert backend_options(ModelConfig(decode_rows=8))["decode_rows"] == 8
    with pytest.raises(ValueError):
        ModelConfig(decode_rows=0)


@pytest.mark.parametrize("prompts", [0, 1, 2, 5, 20, 40, 79, 80, 81, 200])
@pytest.mark.parametrize(("rows", "workers"), [(1, 1), (3, 2), (10, 2), (40, 2), (40, 1), (7, 4)])
def test_row_groups_cover_the_call_in_order_within_the_limits(prompts, rows, workers):
    groups = row_groups(prompts, rows, workers)
    assert [i for group in groups for i in group] == list(range(prompts))  # consecutive, in input order, all
    assert all(0 < len(group) <= rows for group in groups)
    assert len(groups) >= min(workers, prompts)  # a group for every worker thread while prompts last
    # as many groups for every worker (no thread left alone with the last one), unless there are fewer prompts
    assert len(groups) % workers == 0 or len(groups) == prompts
    # no more groups than needed: a round fewer would not hold the prompts
    assert (len(groups) - workers) * rows < prompts
    assert max(map(len, groups), default=0) - min(map(len, groups), default=0) <= 1  # balanced


def test_a_rows_positions_start_after_its_left_padding_and_run_to_the_end():
    own = torch.tensor([[0, 0, 1, 1, 1], [1, 1, 1, 1, 1], [0, 0, 0, 0, 1]], dtype=torch.bool)
    assert own_starts(own[:, None, None], 3, 5) == [2, 0, 4]
    assert own_starts(None, 2, 5) == [0, 0]
    gap = own.clone()
    gap[0, 3] = False  # a hole in a row's positions: a slice from its start would read it
    with pytest.raises(ValueError, match="left padding"):
        own_starts(gap[:, None, None], 3, 5)
    with pytest.raises(TypeError, match="boolean"):
        own_starts(own[:, None, None].float(), 3, 5)


@pytest.mark.parametrize("feature", [{"softcap": 30.0}, {"s_aux": torch.zeros(3)}])
def test_attention_features_the_rows_cannot_honour_are_refused(feature):
    query, kv = torch.zeros(2, 3, 1, 4), torch.zeros(2, 3, 5, 4)  # a decoding step of two rows
    with pytest.raises(ValueError, match="decode_rows: 1"):
        own_rows_attention(None, query, kv, kv, None, **feature)
