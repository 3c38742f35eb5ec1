"""The hf backend on the embedded SmolLM2-135M-Instruct: batching, padding, limits, stops, sampling, and label
scoring (`label_logprobs`)."""

import functools
from dataclasses import replace

import numpy as np
import pytest

from dpicl.inference import Backend, GenerationParams, load_backend
from dpicl.inference.base import LabelScorer, supports
from tests.inference.device import DEVICE
from tests.inference.prompts import LIST, LONG, MEDIUM, SHORT, SILENT

pytestmark = [pytest.mark.slow, pytest.mark.model]



@pytest.fixture(scope="module")
def backend():
    b = load_backend("hf", model="smollm2", device=DEVICE, threads=1, batch_size=16)
    yield b
    b.close()


def test_is_a_backend(backend):
    assert isinstance(backend, Backend)
    assert backend.name == "hf"
    assert backend._bos_id is None  # SmolLM2 never had a <bos> prepended


def test_empty_batch(backend):
    assert backend.generate([], GenerationParams()) == []
    with pytest.raises(TypeError):
        backend.generate("a bare string", GenerationParams())


def test_batch_equals_one_by_one_in_input_order(backend):
    params = GenerationParams(max_new_tokens=12)
    prompts = [MEDIUM, SHORT, LONG, LIST]  # not sorted by length: the backend reorders internally
    alone = [backend.generate([p], params)[0] for p in prompts]
    assert len(set(alone)) == len(alone)  # distinct outputs, so a permutation would be caught
    assert backend.generate(prompts, params) == alone
    backend.batch_size = 3  # two micro-batches, padding within each
    try:
        assert backend.generate(prompts + prompts[:2], params) == alone + alone[:2]
    finally:
        backend.batch_size = 16


def test_max_new_tokens_bounds_output(backend):
    short = backend.generate([LIST], GenerationParams(max_new_tokens=3))[0]
    longer = backend.generate([LIST], GenerationParams(max_new_tokens=24))[0]
    assert backend.count_tokens([short])[0] <= 3
    assert len(longer) > len(short) and longer.startswith(short)  # greedy: a prefix of the longer run


def test_a_completion_the_token_limit_cuts_ends_at_a_sentence_boundary(backend):
    params = GenerationParams(max_new_tokens=48, stop=("\n",))
    whole = backend.generate([MEDIUM], params)[0]
    for limit in (6, 9):  # both cut it (asserted below)
        cut = backend.generate([MEDIUM], replace(params, max_new_tokens=limit))[0]
        assert cut[-1] in ".!?", cut
        # greedy: what it keeps is the start of the longer completion (a closing period may have been added)
        assert whole.startswith(cut.rstrip(".!?")) and len(cut) < len(whole)


def test_stop_strings_cut_after_leading_whitespace(backend):
    full = backend.generate([LIST], GenerationParams(max_new_tokens=24))[0]
    assert "\n" in full  # the list continues on new lines
    cut = backend.generate([LIST], GenerationParams(max_new_tokens=24, stop=("\n",)))[0]
    assert cut and "\n" not in cut
    assert cut == full.split("\n")[0].strip()
    two = backend.generate([LIST, MEDIUM], GenerationParams(max_new_tokens=24, stop=("\n", ".")))
    assert all(out and "\n" not in out and "." not in out for out in two)


def test_the_silent_prompts_most_likely_first_token_ends_the_answer(backend):
    """The premise of the tests below: left alone, SmolLM2 answers SILENT with nothing."""
    import torch

    with torch.inference_mode():
        logits = backend.model(**backend.tokenizer(SILENT, return_tensors="pt").to(backend.device)).logits[0, -1]
    assert int(logits.argmax()) in backend.eos_token_ids


@pytest.mark.parametrize("params", [
    GenerationParams(max_new_tokens=12, stop=("\n",)),
    GenerationParams(max_new_tokens=12, stop=("\n",), public_prompts=True),
    GenerationParams(max_new_tokens=12, stop=("\n",), temperature=0.7, seed=1),
], ids=["greedy", "public", "sampled"])
def test_an_answer_does_not_end_before_it_shows_something(backend, params):
    """`empty_answers: false` (the default): the end-of-sequence token is masked while an answer is blank, in every
    row of a batch (the silent prompt between others, and twice in a public batch: one shared prefill)."""
    prompts = [SHORT, SILENT, MEDIUM, SILENT]
    answers = backend.generate(prompts, params)
    assert all(answer.strip() for answer in answers)
    if params.greedy:  # a sampled row draws from its place's stream: alone it is another draw
        assert answers[1:2] == backend.generate([SILENT], params)


def test_empty_answers_lets_the_model_end_at_once(backend):
    """The counter-example the setting exists for: greedy, SILENT's answer is empty when the model may end it."""
    params = GenerationParams(max_new_tokens=12, stop=("\n",), empty_answers=True)
    assert backend.generate([SHORT, SILENT], params)[1] == ""
    assert backend.generate([SILENT], replace(params, public_prompts=True)) == [""]


def test_stop_criteria_stops_generation_early(backend):
    import torch

    from dpicl.inference.hf import _StopStrings

    tok = backend.tokenizer
    prompt = tok("Q:").input_ids
    gen = [tok("\n\nParis").input_ids, tok("\nParis\nLyon").input_ids]
    width = max(map(len, gen))
    # As in generate: a shared prompt width, generated tokens after it, finished rows padded on the right.
    batch = torch.tensor([prompt + g + [tok.pad_token_id] * (width - len(g)) for g in gen])
    stopper = _StopStrings(tok, ("\n",), prompt_len=len(prompt))
    # Row 0 has only a leading newline (not a stop); row 1 has a newline after text.
    assert stopper(batch, None).tolist() == [False, True]


def test_seeded_sampling_reproducible_and_seed_dependent(backend):
    import torch

    prompts = [SHORT, MEDIUM, LIST]
    params = GenerationParams(max_new_tokens=10, temperature=1.0, seed=123)
    state = torch.random.get_rng_state()
    first = backend.generate(prompts, params)
    assert torch.equal(state, torch.random.get_rng_state())  # the caller's RNG is left alone
    assert backend.generate(prompts, params) == first
    others = [backend.generate(prompts, replace(params, seed=s)) for s in (1, 2)]
    assert any(o != first for o in others)
    greedy = backend.generate(prompts, GenerationParams(max_new_tokens=10))
    assert first != greedy
    assert backend.generate(prompts, GenerationParams(max_new_tokens=10, seed=5)) == greedy


def test_unseeded_sampling_varies(backend):
    params = GenerationParams(max_new_tokens=10, temperature=1.0)
    runs = [backend.generate([SHORT, MEDIUM, LIST], params) for _ in range(3)]
    assert runs[0] != runs[1] or runs[1] != runs[2]


def test_top_p_tiny_is_greedy(backend):
    # Nucleus sampling with a tiny top_p keeps only the most likely token: the same as greedy.
    greedy = backend.generate([SHORT, MEDIUM], GenerationParams(max_new_tokens=10))
    params = GenerationParams(max_new_tokens=10, temperature=1.0, top_p=1e-6, seed=7)
    nucleus = backend.generate([SHORT, MEDIUM], params)
    assert nucleus == greedy


def test_copies_of_a_public_prompt_share_one_prefill_and_answer_as_each_alone(backend, monkeypatch):
    """ESA samples one public zero-shot prompt many times: each distinct prompt of a public batch is prefilled
    once, its copies decode from copies of that cache, and the greedy answers are each prompt's answer alone."""
    params = GenerationParams(max_new_tokens=12, public_prompts=True)
    call = [MEDIUM, MEDIUM, LIST, MEDIUM, LIST]
    alone = {p: backend.generate([p], params)[0] for p in (MEDIUM, LIST)}
    prefilled = []
    forward = backend.model.forward

    @functools.wraps(forward)  # generate reads the signature (position_ids for left-padded rows)
    def recording(*args, **kwargs):
        ids = kwargs.get("input_ids")
        if ids is not None and ids.shape[1] > 1:
            prefilled.append(ids.shape[0])
        return forward(*args, **kwargs)

    monkeypatch.setattr(backend.model, "forward", recording)
    assert backend.generate(call, params) == [alone[p] for p in call]
    assert prefilled == [2]  # one prefill of the two distinct prompts, none of the copies


def test_sampled_copies_of_a_public_prompt_differ_and_follow_the_seed(backend):
    params = GenerationParams(max_new_tokens=12, temperature=1.0, seed=11, public_prompts=True)
    first = backend.generate([MEDIUM] * 6, params)
    assert len(set(first)) > 1  # each copy samples its own tokens from the shared cache
    assert backend.generate([MEDIUM] * 6, params) == first


def test_count_tokens(backend):
    counts = backend.count_tokens([SHORT, LONG])
    assert 0 < counts[0] < counts[1]
    assert backend.count_tokens([]) == []


# ---------------------------------------------------------------- label scoring

SENTIMENT = [" positive", " negative"]
SHOTS = (
    "Review: a gorgeous, witty, seductive movie\nSentiment: positive\n\n"
    "Review: the plot is nothing but boilerplate cliches\nSentiment: negative\n\n"
    "Review: an absolute joy to watch from start to finish\nSentiment: positive\n\n"
    "Review: dull, lifeless and painfully slow\nSentiment: negative\n\n"
)


def review(text: str) -> str:
    return f"{SHOTS}Review: {text}\nSentiment:"


def test_backend_supports_label_logprobs(backend):
    assert supports(backend, "label_logprobs") and isinstance(backend, LabelScorer)


def test_label_token_ids(backend):
    ids = backend.label_token_ids(SENTIMENT)
    assert backend.tokenizer.convert_ids_to_tokens(ids) == ["\u0120positive", "\u0120negative"]
    # a multi-token label is scored by its first token
    assert backend.label_token_ids([" Abbreviation", " Entity"])[0] == backend.label_token_ids([" Ab"])[0]


def test_a_multi_token_label_is_warned_about_once_and_a_one_token_label_not(backend, caplog, monkeypatch):
    from dpicl.inference import openai_compat

    monkeypatch.setattr(openai_compat, "_WARNED_LABELS", set())
    with caplog.at_level("WARNING", logger=openai_compat.__name__):
        backend.label_token_ids([" Abbreviation", " Person"])
        backend.label_token_ids([" Abbreviation", " Person"])
    [record] = caplog.records
    assert "' Abbreviation'" in record.getMessage() and "' Ab'" in record.getMessage()
    assert "calibrate" in record.getMessage() and "Person" not in record.getMessage()


def test_label_token_ids_refuses_labels_sharing_their_first_token(backend):
    with pytest.raises(ValueError) as err:
        backend.label_token_ids([" Entity", " Ab", " Abbreviation"])
    message = str(err.value)
    assert "' Ab'" in message and "' Abbreviation'" in message and "first token" in message


@pytest.mark.parametrize("labels", [[" positive", ""], []])
def test_label_token_ids_refuses_empty(backend, labels):
    with pytest.raises(ValueError, match="empty|no continuations"):
        backend.label_token_ids(labels)


def test_label_logprobs_types_and_empty(backend):
    with pytest.raises(TypeError):
        backend.label_logprobs("a bare string", SENTIMENT)
    with pytest.raises(TypeError):
        backend.label_logprobs([SHORT], " positive")
    empty = backend.label_logprobs([], SENTIMENT)
    assert empty.shape == (0, 2)


def test_label_logprobs_equal_a_direct_unbatched_forward(backend):
    import torch

    prompts = [review("a wonderful, moving film"), SHORT, LIST]
    labels = [" positive", " negative", " Paris", " 3"]
    scores = backend.label_logprobs(prompts, labels)
    assert scores.shape == (3, 4) and scores.dtype == np.float64
    label_ids = [backend.tokenizer(text, add_special_tokens=False).input_ids[0] for text in labels]
    for prompt, row in zip(prompts, scores, strict=True):
        ids = torch.tensor([backend.tokenizer(prompt).input_ids], device=backend.device)
        with torch.inference_mode():
            logits = backend.model(input_ids=ids).logits[0, -1].float()
        expected = torch.log_softmax(logits, dim=-1)[label_ids].cpu().numpy()
        np.testing.assert_allclose(row, expected, atol=1e-4, rtol=0)
    assert (scores < 0).all()


def test_label_logprobs_do_not_depend_on_batch_or_order(backend):
    prompts = [SHORT, review("a wonderful, moving film"), LIST, MEDIUM, LONG]
    alone = np.vstack([backend.label_logprobs([p], SENTIMENT) for p in prompts])
    together = backend.label_logprobs(prompts, SENTIMENT)  # SHORT is left-padded next to longer prompts
    np.testing.assert_allclose(together, alone, atol=1e-4, rtol=0)
    backend.batch_size = 2  # three micro-batches, each padded to its own longest prompt
    try:
        reordered = backend.label_logprobs(prompts[::-1], SENTIMENT[::-1])
    finally:
        backend.batch_size = 16
    np.testing.assert_allclose(reordered, alone[::-1, ::-1], atol=1e-4, rtol=0)


def test_label_logprobs_of_variants_equal_each_prompt_alone(backend):
    """Groups of variants (one prompt and its content-free inputs, as calibrated votes send them) share their prefix's
    forward pass, yet score as each prompt alone; a group without a shared first token runs without a prefix."""
    other = "Review: a tedious exercise\nSentiment: negative\n\n"
    groups = [[review(q) for q in ("a wonderful, moving film that I will see again", "N/A", "", "[MASK]")],
              [f"{other}Review: {q}\nSentiment:" for q in ("so bad", "N/A", "", "[MASK]")],
              [SHORT, LIST, MEDIUM, review("fine")]]  # nothing shared
    flat = [p for group in groups for p in group]
    alone = np.vstack([backend.label_logprobs([p], SENTIMENT) for p in flat])
    together = backend.label_logprobs(flat, SENTIMENT, variants=4)
    np.testing.assert_allclose(together, alone, atol=1e-4, rtol=0)
    assert np.abs(alone[0] - alone[1]).max() > 0.05  # the variants do score differently


def test_label_logprobs_of_a_group_of_variants_do_not_depend_on_the_other_groups(backend):
    mine = [review(q) for q in ("a moving film", "N/A", "")]
    first = backend.label_logprobs(mine + [review("x"), review("a much longer review " * 8), SHORT], SENTIMENT,
                                   variants=3)
    second = backend.label_logprobs(mine + [LONG, LIST, review("y")], SENTIMENT, variants=3)
    assert np.array_equal(first[:3], second[:3])  # bit for bit


@pytest.mark.parametrize("variants", [0, 2, True])
def test_label_logprobs_refuse_variants_that_do_not_divide_the_prompts(backend, variants):
    with pytest.raises(ValueError, match="variants"):
        backend.label_logprobs([SHORT, LIST, MEDIUM], SENTIMENT, variants=variants)


def test_label_logprobs_sentiment_sanity(backend):
    # Holds with a wide margin for SmolLM2-135M (about 3.3 nats for the positive review, 0.9 for the negative).
    positive, negative = backend.label_logprobs(
        [review("a wonderful, moving film"), review("a boring, stupid and terrible mess")], SENTIMENT)
    assert positive[0] > positive[1]
    assert negative[1] > negative[0]
    assert positive[0] - positive[1] > negative[0] - negative[1] + 2
