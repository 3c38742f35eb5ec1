"""The hf backend on the embedded SmolLM2-135M-Instruct: batching, padding, limits, stops, sampling."""

from dataclasses import replace

import pytest

from dpicl.inference import Backend, GenerationParams, load_backend

pytestmark = [pytest.mark.slow, pytest.mark.model]

SHORT = "The capital of France is"
MEDIUM = (
    "Dialogue:\nAnna: Are we still meeting at five?\nBen: Yes, at the cafe.\nSummarize the above dialogue:"
)
LONG = (
    "Dialogue:\nTom: I lost my keys again.\nMia: Did you check the kitchen drawer?\nTom: Yes, and the car.\n"
    "Mia: Maybe you left them at the office yesterday evening.\nTom: I will call the front desk.\n"
    "Summarize the above dialogue:"
)
LIST = "Here is a list of fruits:\n1. Apple\n2."


@pytest.fixture(scope="module")
def backend():
    b = load_backend("hf", model="smollm2", device="cpu", threads=1, batch_size=16)
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


def test_stop_strings_cut_after_leading_whitespace(backend):
    full = backend.generate([LIST], GenerationParams(max_new_tokens=24))[0]
    assert "\n" in full  # the list continues on new lines
    cut = backend.generate([LIST], GenerationParams(max_new_tokens=24, stop=("\n",)))[0]
    assert cut and "\n" not in cut
    assert cut == full.split("\n")[0].strip()
    two = backend.generate([LIST, MEDIUM], GenerationParams(max_new_tokens=24, stop=("\n", ".")))
    assert all(out and "\n" not in out and "." not in out for out in two)


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


def test_count_tokens(backend):
    counts = backend.count_tokens([SHORT, LONG])
    assert 0 < counts[0] < counts[1]
    assert backend.count_tokens([]) == []
