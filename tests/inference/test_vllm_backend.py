"""The vllm backend (in-process engine, CPU build in .venv-vllm) on the embedded SmolLM2-135M-Instruct, fp32: the
hf backend's contract (order, limits, stops, seeds, label and next-token log-probabilities), and agreement with
hf (greedy outputs; log-probabilities to a few decimals). Run with `make test-vllm`."""

import json
import subprocess
import sys
from dataclasses import replace

import numpy as np
import pytest

from dpicl.inference import Backend, GenerationParams
from dpicl.inference.base import LabelScorer, TokenScorer, postprocess, require, supports
from tests.inference.conftest import require_vllm
from tests.inference.prompts import LIST, LONG, MEDIUM, SHORT, SILENT

pytestmark = [pytest.mark.vllm, pytest.mark.slow, pytest.mark.model]

PROMPTS = [MEDIUM, SHORT, LONG, LIST]
CONTINUATION = " They will meet at the cafe at five and talk"
SENTIMENT = [" positive", " negative"]
SHOTS = (
    "Review: a gorgeous, witty, seductive movie\nSentiment: positive\n\n"
    "Review: the plot is nothing but boilerplate cliches\nSentiment: negative\n\n"
)
TOP = 50


def review(text: str) -> str:
    return f"{SHOTS}Review: {text}\nSentiment:"


def test_is_a_backend_with_both_capabilities(vllm_backend):
    b = vllm_backend
    assert isinstance(b, Backend) and b.name == "vllm"
    assert isinstance(b, LabelScorer) and isinstance(b, TokenScorer)
    require(b, "next_token_logprobs")
    assert supports(b, "label_logprobs")
    assert b.device == "cpu"
    assert b.vocab_size == 49152
    assert b.eos_token_ids == frozenset({b.tokenizer.eos_token_id})


def test_environment_defaults_do_not_override_the_user(monkeypatch, tmp_path):
    from dpicl.inference.vllm import configure_environment

    monkeypatch.setenv("DPICL_CACHE", str(tmp_path))
    monkeypatch.setenv("OMP_NUM_THREADS", "3")
    for key in ("VLLM_CPU_KVCACHE_SPACE", "VLLM_ENABLE_V1_MULTIPROCESSING", "VLLM_CACHE_ROOT", "TMPDIR",
                "TORCHINDUCTOR_CACHE_DIR"):
        monkeypatch.setenv(key, "recorded")  # so that undoing it removes what configure_environment sets
        monkeypatch.delenv(key)
    chosen = configure_environment(cpu=True)
    assert "OMP_NUM_THREADS" not in chosen  # the user's setting stays
    assert chosen["VLLM_CPU_KVCACHE_SPACE"] == "1" and chosen["VLLM_ENABLE_V1_MULTIPROCESSING"] == "0"
    assert chosen["VLLM_CACHE_ROOT"] == str(tmp_path / "vllm") and (tmp_path / "vllm").is_dir()
    assert configure_environment(cpu=True) == {}  # all set now
    monkeypatch.delenv("VLLM_CPU_KVCACHE_SPACE")
    monkeypatch.delenv("OMP_NUM_THREADS")
    assert set(configure_environment(cpu=False)) == set()  # CPU-only settings are left alone on a GPU


def test_empty_batch_and_bare_string(vllm_backend):
    assert vllm_backend.generate([], GenerationParams()) == []
    with pytest.raises(TypeError):
        vllm_backend.generate("a bare string", GenerationParams())


def test_greedy_outputs_agree_with_hf(vllm_backend, hf_reference):
    params = GenerationParams(max_new_tokens=16)
    ours = vllm_backend.generate(PROMPTS, params)
    theirs = hf_reference.generate(PROMPTS, params)
    assert len(set(ours)) == len(ours)  # distinct outputs: a permutation would be caught
    assert ours == theirs


def test_batch_equals_one_by_one_in_input_order(vllm_backend):
    params = GenerationParams(max_new_tokens=12)
    alone = [vllm_backend.generate([p], params)[0] for p in PROMPTS]
    assert vllm_backend.generate(PROMPTS + PROMPTS[:2], params) == alone + alone[:2]


def test_on_a_terminal_the_progress_chunks_change_nothing(vllm_backend, monkeypatch):
    from dpicl.inference import vllm as vllm_module

    params = GenerationParams(max_new_tokens=12)
    plain = vllm_backend.generate(PROMPTS, params, progress=True)  # not a terminal: one engine call
    calls = []
    generate = vllm_backend.llm.generate
    monkeypatch.setattr(vllm_module, "shown", lambda: True)
    monkeypatch.setattr(vllm_module, "PROGRESS_CHUNK", 2)
    monkeypatch.setattr(vllm_backend.llm, "generate", lambda *a, **k: calls.append(k) or generate(*a, **k))
    assert vllm_backend.generate(PROMPTS, params, progress=True) == plain
    assert len(calls) == -(-len(PROMPTS) // 2) and not any(k["use_tqdm"] for k in calls)  # our bar, not vLLM's


def test_max_new_tokens_bounds_output(vllm_backend):
    short = vllm_backend.generate([LIST], GenerationParams(max_new_tokens=3))[0]
    longer = vllm_backend.generate([LIST], GenerationParams(max_new_tokens=24))[0]
    assert vllm_backend.count_tokens([short])[0] <= 3
    assert len(longer) > len(short) and longer.startswith(short)


def test_stop_strings_cut_after_leading_whitespace(vllm_backend, hf_reference):
    full = vllm_backend.generate([LIST], GenerationParams(max_new_tokens=24))[0]
    assert "\n" in full
    cut = vllm_backend.generate([LIST], GenerationParams(max_new_tokens=24, stop=("\n",)))[0]
    assert cut and "\n" not in cut and cut == full.split("\n")[0].strip()
    params = GenerationParams(max_new_tokens=24, stop=("\n", "."))
    assert vllm_backend.generate(PROMPTS, params) == hf_reference.generate(PROMPTS, params)


def test_a_stop_in_the_leading_whitespace_is_not_the_end(vllm_backend, hf_reference):
    # MEDIUM makes SmolLM2 open with a newline: the engine's own "\n" stop ends that completion empty.
    b = vllm_backend
    engine = b.llm.generate([b._vllm.TokensPrompt(prompt_token_ids=b._encode([MEDIUM])[0])],
                            b._vllm.SamplingParams(max_tokens=20, temperature=0.0, stop=["\n"]),
                            use_tqdm=False)[0].outputs[0]
    assert engine.text == "" and engine.stop_reason == "\n"  # the case this test is about
    raw = b.generate([MEDIUM], GenerationParams(max_new_tokens=20))[0]
    params = GenerationParams(max_new_tokens=20, stop=("\n",))
    got = b.generate([MEDIUM], params)[0]
    assert got and got == postprocess(raw, ("\n",)) == hf_reference.generate([MEDIUM], params)[0]


def test_a_completion_stopped_in_its_whitespace_goes_on_within_max_new_tokens(vllm_backend, hf_reference):
    # It continues from its own tokens (not from scratch), so the budget counts the whitespace already generated:
    # with one token SmolLM2's opening newline is the whole completion, as with hf.
    for tokens in (1, 2, 6):
        params = GenerationParams(max_new_tokens=tokens, stop=("\n",))
        ours = vllm_backend.generate([MEDIUM, LIST], params)
        assert ours == hf_reference.generate([MEDIUM, LIST], params)
        assert all(n <= tokens for n in vllm_backend.count_tokens(ours))
    assert vllm_backend.generate([MEDIUM], GenerationParams(max_new_tokens=1, stop=("\n",))) == [""]


def test_an_answer_does_not_end_before_it_shows_something(vllm_backend, hf_reference):
    """SILENT's first token would be EOS: with `empty_answers` false (the default) the answer goes on, as hf's does;
    with it true it is empty."""
    params = GenerationParams(max_new_tokens=12, stop=("\n",))
    ours = vllm_backend.generate([SHORT, SILENT, MEDIUM], params)
    assert ours[1] and ours == hf_reference.generate([SHORT, SILENT, MEDIUM], params)
    assert vllm_backend.generate([SILENT], replace(params, empty_answers=True)) == [""]


def test_copies_of_a_prompt_are_one_request_prefilled_once(vllm_backend):
    # ESA's candidates are sampled copies of one zero-shot prompt: they are one request for n samples, whose
    # samples are scheduled together and share no KV blocks, so the backend prefills the repeated prompt alone
    # first and the samples find its whole blocks in the prefix cache. vLLM's CPU default of 128-token blocks
    # would leave a prompt this short (~70 tokens) out of the cache.
    b = vllm_backend
    assert b.llm.llm_engine.vllm_config.cache_config.block_size == 32
    calls = []
    run = b._run

    def recording(rows, params, progress=False):
        calls.append((rows, params, run(rows, params, progress)))
        return calls[-1][2]

    b._run = recording
    try:
        b.llm.reset_prefix_cache()
        sampled = b.generate([LONG] * 4 + [SHORT], GenerationParams(max_new_tokens=8, temperature=1.0, seed=4))
        calls_sampled, calls[:] = list(calls), []
        greedy = b.generate([LONG] * 4 + [SHORT], GenerationParams(max_new_tokens=8))
    finally:
        del b._run
    long_ids = b._encode([LONG])[0]
    assert len(long_ids) > 2 * 32
    (warm_rows, _, _), (rows, params, outputs) = calls_sampled
    assert warm_rows == [long_ids]  # only the repeated prompt is prefilled first
    assert rows == [long_ids, b._encode([SHORT])[0]] and [p.n for p in params] == [4, 1]  # one request per prompt
    assert len(outputs[0].outputs) == 4 and len(set(sampled[:4])) > 1  # four samples, not one four times
    assert outputs[0].num_cached_tokens == len(long_ids) // 32 * 32
    # greedy copies: one request, one completion for all of them, no prefill first
    ((rows, params, _),) = calls
    assert len(rows) == 2 and [p.n for p in params] == [1, 1]
    assert greedy[:4] == [b.generate([LONG], GenerationParams(max_new_tokens=8))[0]] * 4 and greedy[4] != greedy[0]


def test_seeded_sampling_reproducible_and_seed_dependent(vllm_backend):
    prompts = [SHORT, MEDIUM, LIST]
    params = GenerationParams(max_new_tokens=10, temperature=1.0, seed=123)
    first = vllm_backend.generate(prompts, params)
    assert vllm_backend.generate(prompts, params) == first
    assert any(vllm_backend.generate(prompts, replace(params, seed=s)) != first for s in (1, 2))
    greedy = vllm_backend.generate(prompts, GenerationParams(max_new_tokens=10))
    assert first != greedy
    assert vllm_backend.generate(prompts, GenerationParams(max_new_tokens=10, seed=5)) == greedy


def test_seeded_copies_of_one_prompt_sample_differently(vllm_backend):
    # ESA samples its candidates from copies of one zero-shot prompt: one seed per request would make them equal.
    out = vllm_backend.generate([SHORT] * 6, GenerationParams(max_new_tokens=12, temperature=1.0, seed=9))
    assert len(set(out)) > 1


def test_unseeded_sampling_varies(vllm_backend):
    params = GenerationParams(max_new_tokens=10, temperature=1.0)
    runs = [vllm_backend.generate([SHORT, MEDIUM, LIST], params) for _ in range(3)]
    assert runs[0] != runs[1] or runs[1] != runs[2]


def test_top_p_tiny_is_greedy(vllm_backend):
    greedy = vllm_backend.generate([SHORT, MEDIUM], GenerationParams(max_new_tokens=10))
    nucleus = vllm_backend.generate([SHORT, MEDIUM], GenerationParams(max_new_tokens=10, temperature=1.0,
                                                                      top_p=1e-6, seed=7))
    assert nucleus == greedy


# ---------------------------------------------------------------- log-probabilities

def test_label_logprobs_agree_with_hf(vllm_backend, hf_reference):
    prompts = [review("a wonderful, moving film"), review("a boring, stupid and terrible mess"), SHORT, LIST]
    labels = [" positive", " negative", " Paris", " 3"]
    ours = vllm_backend.label_logprobs(prompts, labels)
    assert ours.shape == (4, 4) and ours.dtype == np.float64 and (ours < 0).all()
    np.testing.assert_allclose(ours, hf_reference.label_logprobs(prompts, labels), atol=2e-3, rtol=0)
    assert vllm_backend.label_token_ids(labels) == hf_reference.label_token_ids(labels)
    assert ours[0, 0] > ours[0, 1] and ours[1, 1] > ours[1, 0]
    assert vllm_backend.label_logprobs([], SENTIMENT).shape == (0, 2)


def test_label_errors_name_labels_not_prompts(vllm_backend):
    with pytest.raises(ValueError, match="first token"):
        vllm_backend.label_logprobs([SHORT], [" Entity", " Ab", " Abbreviation"])
    with pytest.raises(TypeError):
        vllm_backend.label_logprobs([SHORT], " positive")


def test_next_token_logprobs_agree_with_hf(vllm_backend, hf_reference):
    tokens = vllm_backend.encode_text(CONTINUATION)
    assert tokens == hf_reference.encode_text(CONTINUATION)
    assert vllm_backend.decode(tokens) == CONTINUATION
    for n in (0, 1, 4):
        ours = vllm_backend.next_token_logprobs(PROMPTS, tokens[:n])
        theirs = hf_reference.next_token_logprobs(PROMPTS, tokens[:n], cache=False)
        assert ours.shape == (len(PROMPTS), 49152) and ours.dtype == np.float32
        np.testing.assert_allclose(np.log(np.exp(ours.astype(np.float64)).sum(-1)), 0.0, atol=1e-4)
        for got, want in zip(ours, theirs, strict=True):
            top = np.argsort(want)[::-1][:TOP]
            np.testing.assert_allclose(got[top], want[top], atol=2e-3, rtol=0)
            assert got.argmax() == want.argmax()
    # rows differ, so rows out of order would be caught
    assert not np.allclose(ours[0], ours[1], atol=1e-2)


def test_greedy_decoding_through_next_token_logprobs_equals_generate(vllm_backend):
    suffix: list[int] = []
    for _ in range(10):
        token = int(vllm_backend.next_token_logprobs([SHORT], suffix)[0].argmax())
        suffix.append(token)
        if token in vllm_backend.eos_token_ids:
            break
    text = vllm_backend.generate([SHORT], GenerationParams(max_new_tokens=10))[0]
    cut = suffix[-1] not in vllm_backend.eos_token_ids  # the token limit ended it: generate keeps whole sentences
    assert postprocess(vllm_backend.decode(suffix), (), truncated=cut) == text


def test_token_ids_select_columns_of_the_full_distribution(vllm_backend):
    tokens = vllm_backend.encode_text(CONTINUATION)[:2]
    full = vllm_backend.next_token_logprobs(PROMPTS, tokens)
    columns = [int(full[0].argmax()), 0, vllm_backend.vocab_size - 1, 5, 5, *vllm_backend.eos_token_ids]
    picked = vllm_backend.next_token_logprobs(PROMPTS, tokens, token_ids=columns)  # logprob_token_ids path
    assert picked.shape == (len(PROMPTS), len(columns)) and picked.dtype == np.float32
    np.testing.assert_allclose(picked, full[:, columns], atol=1e-4, rtol=0)
    wide = list(range(200))  # more than vLLM's 128 selected ids: taken from the full row
    np.testing.assert_allclose(vllm_backend.next_token_logprobs(PROMPTS, tokens, token_ids=wide), full[:, wide],
                               atol=1e-4, rtol=0)
    assert vllm_backend.next_token_logprobs(PROMPTS, tokens, token_ids=[]).shape == (len(PROMPTS), 0)


def test_next_token_errors(vllm_backend):
    vocab = vllm_backend.vocab_size
    with pytest.raises(TypeError):
        vllm_backend.next_token_logprobs(SHORT)
    with pytest.raises(TypeError):
        vllm_backend.next_token_logprobs([SHORT], "a suffix as text")
    with pytest.raises(ValueError, match="nothing to predict"):
        vllm_backend.next_token_logprobs([SHORT, ""])
    for bad in ([vocab], [-1]):
        with pytest.raises(ValueError, match="outside the vocabulary") as err:
            vllm_backend.next_token_logprobs([SHORT], [], token_ids=bad)
        assert SHORT not in str(err.value)
    empty = vllm_backend.next_token_logprobs([])
    assert empty.shape == (0, vocab) and empty.dtype == np.float32
    assert vllm_backend.next_token_logprobs([], [1], token_ids=[3, 4]).shape == (0, 2)


COMPILED = """
import json, sys
from dpicl.config import ModelConfig
from dpicl.inference import GenerationParams, backend_options, load_backend
model = ModelConfig(backend="vllm", device="cpu", compile=True, batch_invariant=False)
backend = load_backend(model.backend, **backend_options(model))
print(json.dumps(backend.generate(json.loads(sys.argv[1]), GenerationParams(max_new_tokens=16))))
"""


def test_a_compiled_engine_answers_as_hf(hf_reference):
    """`model.compile: true` (torch.compile instead of eager mode on CPU: faster generation, a slower start) changes
    no greedy answer. In a process of its own: one vLLM engine per process."""
    require_vllm()
    run = subprocess.run([sys.executable, "-c", COMPILED, json.dumps(PROMPTS)], capture_output=True, text=True,
                         timeout=600, check=False)
    assert run.returncode == 0, run.stderr[-2000:]
    compiled = json.loads(run.stdout.strip().splitlines()[-1])
    assert compiled == hf_reference.generate(PROMPTS, GenerationParams(max_new_tokens=16))
