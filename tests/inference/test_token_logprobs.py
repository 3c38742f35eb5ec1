"""The hf backend's `next_token_logprobs` (the `TokenScorer` capability) on the embedded SmolLM2-135M-Instruct:
greedy decoding equals `generate`, batched rows with a shared suffix equal each prompt alone, the KV-cached path
equals a full prefill, sessions (LRU), column selection, and errors."""

import numpy as np
import pytest
import torch

from dpicl.inference import GenerationParams, load_backend
from dpicl.inference.base import CAPABILITIES, TokenScorer, postprocess, require, supports
from tests.inference.device import DEVICE

pytestmark = [pytest.mark.slow, pytest.mark.model]

SHORT = "The capital of France is"
MEDIUM = (
    "Dialogue:\nAnna: Are we still meeting at five?\nBen: Yes, at the cafe.\nSummarize the above dialogue:"
)
LIST = "Here is a list of fruits:\n1. Apple\n2."
PROMPTS = [MEDIUM, SHORT, LIST]  # different lengths, not sorted: SHORT and LIST are left-padded
CONTINUATION = " They will meet at the cafe at five and talk"
TOP = 50  # compare the most likely entries (the far tail is irrelevant for decoding)


@pytest.fixture(scope="module")
def backend():
    b = load_backend("hf", model="smollm2", device=DEVICE, threads=1, batch_size=16)
    yield b
    b.next_token_logprobs([SHORT])
    assert b._token_sessions
    b.close()
    assert not b._token_sessions  # close() drops the kept KV caches
    with pytest.raises(RuntimeError, match="closed"):
        b.next_token_logprobs([SHORT])


@pytest.fixture
def fresh(backend):
    """The backend with no kept sessions, before and after the test."""
    backend.clear_token_cache()
    yield backend
    backend.clear_token_cache()


@pytest.fixture
def fed(fresh):
    """Records the shape of `input_ids` of every forward pass of the model (what was fed)."""
    shapes: list[tuple[int, ...]] = []

    def hook(module, args, kwargs):
        shapes.append(tuple(kwargs["input_ids"].shape))

    handle = fresh.model.register_forward_pre_hook(hook, with_kwargs=True)
    yield shapes
    handle.remove()


def assert_top_close(actual: np.ndarray, expected: np.ndarray, atol: float = 1e-4) -> None:
    """Row by row: the `TOP` most likely tokens of `expected` have the same log-probabilities in `actual`."""
    assert actual.shape == expected.shape
    for got, want in zip(actual, expected, strict=True):
        top = np.argsort(want)[::-1][:TOP]
        np.testing.assert_allclose(got[top], want[top], atol=atol, rtol=0)
        assert got.argmax() == want.argmax()


def alone(backend, prompts, suffix) -> np.ndarray:
    """Each prompt scored by itself with a full prefill (no cache)."""
    return np.vstack([backend.next_token_logprobs([p], suffix, cache=False) for p in prompts])


def test_is_a_token_scorer(backend):
    assert "next_token_logprobs" in CAPABILITIES and "dps-mozo" in CAPABILITIES["next_token_logprobs"]
    assert supports(backend, "next_token_logprobs") and isinstance(backend, TokenScorer)
    require(backend, "next_token_logprobs")
    assert backend.vocab_size == 49152  # the logits' width
    assert backend.eos_token_ids == frozenset({backend.tokenizer.eos_token_id})
    assert all(isinstance(t, int) for t in backend.eos_token_ids)


def test_encode_text_and_decode(backend):
    ids = backend.encode_text(CONTINUATION)
    assert ids and all(isinstance(t, int) for t in ids)
    assert backend.encode_text("") == []
    assert backend.decode(ids) == CONTINUATION
    eos = min(backend.eos_token_ids)
    assert backend.decode([*ids, eos]) == CONTINUATION  # special tokens skipped
    assert backend.decode(np.array(ids)) == CONTINUATION  # numpy ids work too
    with pytest.raises(TypeError):
        backend.encode_text(ids)


@pytest.mark.parametrize("prompt", [SHORT, LIST, MEDIUM])
def test_greedy_decoding_equals_generate(fresh, prompt):
    """The acceptance criterion: argmax decoding through the KV-cached sessions gives `generate`'s greedy tokens."""
    backend, steps = fresh, 12
    enc = backend._pad(backend._encode([prompt]))
    with torch.inference_mode():
        out = backend.model.generate(
            **enc, max_new_tokens=steps, do_sample=False, temperature=None, top_p=None, top_k=None,
            pad_token_id=backend.tokenizer.pad_token_id)
    expected = out[0, enc["input_ids"].shape[1]:].tolist()

    suffix: list[int] = []
    for _ in range(steps):
        logprobs = backend.next_token_logprobs([prompt], suffix)
        assert logprobs.shape == (1, backend.vocab_size) and logprobs.dtype == np.float32
        token = int(logprobs[0].argmax())
        suffix.append(token)
        if token in backend.eos_token_ids:
            break
    assert suffix == expected
    if prompt == SHORT:  # and so the same text as `generate` (once: the token ids above are the stricter test)
        text = backend.generate([prompt], GenerationParams(max_new_tokens=steps))[0]
        cut = suffix[-1] not in backend.eos_token_ids  # the step limit ended it
        assert postprocess(backend.decode(suffix), (), truncated=cut) == text


def test_batched_shared_suffix_equals_each_prompt_alone(fed, fresh):
    backend = fresh
    tokens = backend.encode_text(CONTINUATION)
    lengths = [1, 2, 4, 7]  # a prefill with a suffix, then steps of one, two and three tokens
    shapes = []
    for n in lengths:
        before = len(fed)
        batched = backend.next_token_logprobs(PROMPTS, tokens[:n])
        shapes.append(fed[before:])
        assert batched.shape == (len(PROMPTS), backend.vocab_size) and batched.dtype == np.float32
        assert_top_close(batched, alone(backend, PROMPTS, tokens[:n]))
    # The rows differ, so the comparison above would catch rows out of input order.
    assert all(not np.allclose(batched[i], batched[j], atol=1e-2) for i in range(3) for j in range(i))
    # Batch invariant (the default): each prompt in its own forward passes, one row each and no padding: the
    # prefill of prompt + first suffix token, then only the new tokens.
    assert shapes[0] == [(1, n + 1) for n in backend.count_tokens(PROMPTS)]
    assert shapes[1:] == [[(1, k)] * len(PROMPTS) for k in (1, 2, 3)]


def test_cached_path_equals_full_prefill(fresh):
    backend = fresh
    tokens = backend.encode_text(CONTINUATION)
    for n in [0, 1, 3, 4]:  # a prefill, then steps of one, two and one tokens
        cached = backend.next_token_logprobs(PROMPTS, tokens[:n])
        uncached = backend.next_token_logprobs(PROMPTS, tokens[:n], cache=False)
        assert_top_close(cached, uncached)
        np.testing.assert_allclose(cached, uncached, atol=1e-3, rtol=0)


def test_same_suffix_again_is_free_and_results_are_copies(fed, fresh):
    backend = fresh
    tokens = backend.encode_text(CONTINUATION)[:3]
    first = backend.next_token_logprobs(PROMPTS, tokens)
    first_copy = first.copy()
    first[:] = 0.0  # the caller's array is its own
    calls = len(fed)
    again = backend.next_token_logprobs(PROMPTS, tuple(tokens))
    assert len(fed) == calls  # no forward pass
    np.testing.assert_array_equal(again, first_copy)


def test_non_extending_suffix_reprefills(fed, fresh):
    backend = fresh
    tokens = backend.encode_text(CONTINUATION)
    backend.next_token_logprobs(PROMPTS, tokens[:5])
    counts = backend.count_tokens(PROMPTS)
    cases = [
        [*tokens[:4], tokens[6]],  # as long as the fed suffix, a different last token
        tokens[:3],  # shorter
        [tokens[6], *tokens[1:3]],  # as long, a different first token
    ]
    for suffix in cases:
        fed.clear()
        got = backend.next_token_logprobs(PROMPTS, suffix)
        # a full prefill of prompt + suffix (each prompt in its own forward pass: batch invariant)
        assert fed == [(1, n + len(suffix)) for n in counts]
        assert_top_close(got, alone(backend, PROMPTS, suffix))
    # and the re-prefilled session extends again
    fed.clear()
    extended = [*cases[-1], tokens[4]]
    got = backend.next_token_logprobs(PROMPTS, extended)
    assert fed == [(1, 1)] * len(PROMPTS)
    assert_top_close(got, alone(backend, PROMPTS, extended))


def test_lru_keeps_a_persistent_prompt_set(fed, fresh):
    backend = fresh
    tokens = backend.encode_text(CONTINUATION)
    persistent = [SHORT, LIST]
    backend.next_token_logprobs(persistent, tokens[:1])
    for step in range(1, 4):  # one-off prompt sets each step, without a cache
        backend.next_token_logprobs([f"{LIST} {step}", SHORT], tokens[:step], cache=False)
        fed.clear()
        backend.next_token_logprobs(persistent, tokens[: step + 1])
        assert fed == [(1, 1)] * 2  # still cached: only the new token (per prompt: batch invariant)
    assert list(backend._token_sessions) == [tuple(persistent)]
    # One-off sets that are cached push the least recently used out: up to `token_cache_sessions` are kept.
    for step in range(backend.token_cache_sessions):
        backend.next_token_logprobs([f"{SHORT} {step}"], tokens[:1])
    assert len(backend._token_sessions) == backend.token_cache_sessions
    assert tuple(persistent) not in backend._token_sessions
    fed.clear()
    backend.next_token_logprobs(persistent, tokens[:5])
    assert fed[0][1] > 1  # prefilled again
    backend.clear_token_cache()
    assert not backend._token_sessions


def test_token_ids_select_columns_of_the_full_distribution(fresh):
    backend = fresh
    tokens = backend.encode_text(CONTINUATION)[:2]
    full = backend.next_token_logprobs(PROMPTS, tokens)
    # rows are log-probabilities over the full vocabulary
    lse = np.log(np.exp(full.astype(np.float64)).sum(axis=-1))
    np.testing.assert_allclose(lse, 0.0, atol=1e-4)
    assert (full <= 0).all()
    columns = [int(full[0].argmax()), 0, backend.vocab_size - 1, 5, 5, *backend.eos_token_ids]
    picked = backend.next_token_logprobs(PROMPTS, tokens, token_ids=columns)  # from the kept session
    assert picked.shape == (len(PROMPTS), len(columns)) and picked.dtype == np.float32
    np.testing.assert_array_equal(picked, full[:, columns])
    picked = backend.next_token_logprobs(PROMPTS, tokens, token_ids=np.array(columns), cache=False)
    np.testing.assert_allclose(picked, full[:, columns], atol=1e-4, rtol=0)
    assert backend.next_token_logprobs(PROMPTS, tokens, token_ids=[]).shape == (len(PROMPTS), 0)


def test_empty_prompt_needs_a_suffix(fresh):
    backend = fresh
    with pytest.raises(ValueError, match="nothing to predict"):
        backend.next_token_logprobs([SHORT, ""])
    tokens = backend.encode_text(CONTINUATION)[:3]
    got = backend.next_token_logprobs([SHORT, ""], tokens)  # the suffix alone is a context
    assert_top_close(got, alone(backend, [SHORT, ""], tokens))


def test_errors_and_empty_prompt_set(fresh):
    backend = fresh
    vocab = backend.vocab_size
    with pytest.raises(TypeError):
        backend.next_token_logprobs(SHORT)
    with pytest.raises(TypeError):
        backend.next_token_logprobs([SHORT, 3])
    with pytest.raises(TypeError):
        backend.next_token_logprobs([SHORT], "a suffix as text")
    with pytest.raises(TypeError):
        backend.next_token_logprobs([SHORT], [1.5])
    for bad in ([vocab], [-1], [1, 2, vocab + 10]):
        with pytest.raises(ValueError, match="outside the vocabulary") as err:
            backend.next_token_logprobs([SHORT], bad)
        assert SHORT not in str(err.value)  # prompts are private text
        with pytest.raises(ValueError, match="outside the vocabulary"):
            backend.next_token_logprobs([SHORT], [], token_ids=bad)
    assert not backend._token_sessions  # failed calls keep nothing
    empty = backend.next_token_logprobs([])
    assert empty.shape == (0, vocab) and empty.dtype == np.float32
    assert backend.next_token_logprobs([], [1, 2], token_ids=[3, 4]).shape == (0, 2)
    # numpy integers (e.g. an argmax) are token ids
    got = backend.next_token_logprobs([SHORT], [np.int64(7042)], token_ids=[np.int32(30)])
    assert got.shape == (1, 1)
