"""The openai backend against a fake in-process OpenAI-compatible server (tests/inference/fake_openai.py): input
order under bounded concurrency, retries (the openai SDK's) with exponential back-off on transient failures only,
stops in leading whitespace, log-probabilities by token id, a clear error where the server lacks them, and errors
and logs that never hold prompt text or the API key (nor a key meant for OpenAI's own service)."""

import logging

import numpy as np
import pytest

from dpicl.config import ModelConfig
from dpicl.inference import Backend, GenerationParams, backend_options, load_backend
from dpicl.inference.base import UnsupportedCapabilityError, postprocess, supports
from dpicl.inference.openai_compat import OpenAIBackend, OpenAICompatError, row_seeds
from tests.inference.fake_openai import FakeServer, completion_text, fake_logprobs

SECRET = "patient Jane Roe, diagnosis 4711"  # stands for private text


@pytest.fixture
def server():
    with FakeServer() as s:
        yield s


def backend_for(server: FakeServer, **kwargs) -> OpenAIBackend:
    kwargs = {"timeout": 5.0, "batch_invariant": False, **kwargs}
    return load_backend("openai", model="fake-model", base_url=server.base_url, **kwargs)


def chain_text(err: BaseException) -> str:
    """The messages of an exception and everything it chains to (what a traceback would print)."""
    parts, seen = [], set()
    while err is not None and id(err) not in seen:
        seen.add(id(err))
        parts.append(f"{type(err).__name__}: {err}")
        err = err.__cause__ or err.__context__
    return "\n".join(parts)


def test_is_a_backend_and_sends_the_model_and_params(server):
    backend = backend_for(server)
    assert isinstance(backend, Backend) and backend.name == "openai"
    assert supports(backend, "label_logprobs") and supports(backend, "next_token_logprobs")
    assert backend.generate([], GenerationParams()) == []
    with pytest.raises(TypeError):
        backend.generate("a bare string", GenerationParams())
    params = GenerationParams(max_new_tokens=7, temperature=0.8, top_p=0.9, seed=3, stop=("\n",))
    assert backend.generate(["hello"], params) == ["ECHO(hello)"]
    body = server.bodies[-1]
    assert body["model"] == "fake-model" and body["prompt"] == "hello" and body["max_tokens"] == 7
    assert body["temperature"] == 0.8 and body["top_p"] == 0.9 and body["stop"] == ["\n"]
    assert body["seed"] == row_seeds(3, 1)[0]
    backend.generate(["hello"], GenerationParams())
    assert server.bodies[-1]["temperature"] == 0.0 and "seed" not in server.bodies[-1]
    backend.close()
    with pytest.raises(RuntimeError, match="closed"):
        backend.generate(["hello"], GenerationParams())


def test_outputs_in_input_order_under_bounded_concurrency():
    with FakeServer(jitter=0.05) as server:  # random delays: answers arrive out of order
        backend = backend_for(server, max_concurrency=3)
        prompts = [f"prompt number {i}" for i in range(15)]
        out = backend.generate(prompts, GenerationParams(stop=("\n",)))
        assert out == [f"ECHO({p})" for p in prompts]
        assert 2 <= server.max_in_flight <= 3
        assert sum(server.attempts.values()) == len(prompts)  # one request per prompt, nothing retried
        backend.close()


def test_without_stops_the_whole_completion_is_postprocessed(server):
    backend = backend_for(server)
    # the fake server ends a completion without stops by its token limit ("length"): cut at a sentence boundary
    expected = postprocess(completion_text("abc"), (), truncated=True)
    assert backend.generate(["abc"], GenerationParams()) == [expected] and expected.endswith(".")
    assert "stop" not in server.bodies[-1]


def test_a_stop_in_the_leading_whitespace_is_generated_again_without_stops(server):
    backend = backend_for(server)
    prompts = ["lead one", "plain two"]
    out = backend.generate(prompts, GenerationParams(stop=("\n",)))
    assert out == ["body of lead one", "ECHO(plain two)"]  # not "" for the completion that opened with "\n"
    assert server.attempts["lead one"] == 2 and server.attempts["plain two"] == 1
    first, again = [b for b in server.bodies if b["prompt"] == "lead one"]
    assert first["stop"] == ["\n"] and "stop" not in again


def test_seeds_differ_per_prompt_and_repeat_per_call():
    seeds = row_seeds(42, 4)
    assert len(set(seeds)) == 4 and seeds == row_seeds(42, 4) and seeds != row_seeds(43, 4)
    assert row_seeds(42, 4, round_=1) != seeds and row_seeds(None, 2) == [None, None]


@pytest.mark.parametrize("status", [500, 502, 503, 429])
def test_transient_statuses_are_retried_with_exponential_backoff(server, status):
    backend = backend_for(server, max_retries=4)
    prompt = f"fail-{status}-2 {SECRET}"
    assert backend.generate([prompt, "fine"], GenerationParams(stop=("\n",))) == [f"ECHO({prompt})", "ECHO(fine)"]
    assert server.attempts[prompt] == 3
    gaps = np.diff(server.arrivals[prompt])
    for i, gap in enumerate(gaps):  # the SDK's 0.5 s, then 1 s, less up to 25 % jitter
        assert gap >= 0.5 * 2**i * 0.75 * 0.95
    assert gaps[1] > 1.4 * gaps[0]


def test_broken_connections_and_timeouts_are_retried(server):
    backend = backend_for(server, timeout=0.3, max_retries=3)
    prompts = [f"drop-2 {SECRET}", f"sleep-800-1 {SECRET}"]
    out = backend.generate(prompts, GenerationParams(stop=("\n",)))
    assert out == [f"ECHO({p})" for p in prompts]
    assert server.attempts[prompts[0]] == 3 and server.attempts[prompts[1]] == 2


def test_client_errors_are_not_retried_and_hide_the_prompt(server, caplog):
    backend = backend_for(server, max_retries=4)
    prompts = ["fine", f"fail-400-9 {SECRET}", f"fail-422-9 {SECRET} again"]
    with caplog.at_level(logging.DEBUG), pytest.raises(OpenAICompatError) as err:
        backend.generate(prompts, GenerationParams())
    assert server.attempts[prompts[1]] == 1 and server.attempts[prompts[2]] == 1  # never retried
    message = chain_text(err.value)
    assert "HTTP 400" in message and "2 of 3" in message and server.base_url in message
    assert SECRET not in message and "bad prompt" not in message  # neither the prompt nor the response body
    assert SECRET not in caplog.text


def test_giving_up_names_attempts_and_status_not_the_prompt(server, caplog):
    backend = backend_for(server, max_retries=1)
    with caplog.at_level(logging.DEBUG), pytest.raises(OpenAICompatError) as err:
        backend.generate([f"fail-503-9 {SECRET}"], GenerationParams())
    message = chain_text(err.value)
    assert "HTTP 503" in message and "2 attempts" in message and SECRET not in message
    assert "Retrying request" in caplog.text and SECRET not in caplog.text


def test_an_unreachable_server_fails_after_retries(server):
    url = server.base_url
    server.__exit__()  # nothing listens there any more
    backend = load_backend("openai", model="m", base_url=url, max_retries=1, timeout=2.0, batch_invariant=False)
    with pytest.raises(OpenAICompatError) as err:
        backend.generate([SECRET], GenerationParams())
    message = chain_text(err.value)
    assert "APIConnectionError" in message and "2 attempts" in message and url in message and SECRET not in message


def test_api_key_from_the_environment_only(server, monkeypatch, caplog):
    monkeypatch.setenv("MY_KEY_VAR", "sk-test-123")
    backend = backend_for(server, api_key_env="MY_KEY_VAR", max_retries=1)
    backend.generate(["x"], GenerationParams())
    assert server.headers[-1]["authorization"] == "Bearer sk-test-123"
    with caplog.at_level(logging.DEBUG), pytest.raises(OpenAICompatError) as err:
        backend.generate(["fail-500-9 y"], GenerationParams())
    assert "sk-test-123" not in chain_text(err.value) and "sk-test-123" not in caplog.text
    monkeypatch.delenv("MY_KEY_VAR")
    monkeypatch.setenv("OPENAI_API_KEY", "sk-for-openai-only")  # never sent to another server
    monkeypatch.setenv("OPENAI_ADMIN_KEY", "sk-admin-for-openai-only")
    backend_for(server, api_key_env="MY_KEY_VAR").generate(["x"], GenerationParams())
    assert "authorization" not in server.headers[-1]
    assert not any("for-openai-only" in value for value in server.headers[-1].values())


def test_config_selects_and_configures_the_backend(server):
    model = ModelConfig(backend="openai", llm="fake-model", base_url=server.base_url + "/", max_concurrency=2,
                        max_retries=1, timeout=3.0, batch_invariant=False)
    options = backend_options(model)
    assert options["base_url"] == server.base_url and options["max_concurrency"] == 2
    assert options["batch_invariant"] is False
    backend = load_backend(model.backend, **options)
    assert backend.max_concurrency == 2 and backend.max_retries == 1
    assert backend.generate(["cfg"], GenerationParams(stop=("\n",))) == ["ECHO(cfg)"]
    assert "base_url" not in ModelConfig().model_dump()  # defaults stay out of artifact keys
    with pytest.raises(ValueError):
        ModelConfig(backend="openai", base_url="localhost:8000", batch_invariant=False)
    with pytest.raises(ValueError):
        ModelConfig(backend="tgi")


def test_the_pipeline_builds_the_configured_backend(server):
    from dpicl.config import Config
    from dpicl.tasks import context

    cfg = Config.model_validate({"name": "x", "private_dataset": "p", "backlog": "b",
                                 "model": {"backend": "openai", "llm": "fake-model", "base_url": server.base_url,
                                           "max_concurrency": 3, "max_retries": 2, "batch_invariant": False}})
    backend = context.backend(cfg)
    assert (backend.max_concurrency, backend.max_retries) == (3, 2)
    assert backend.generate(["cfg"], GenerationParams(stop=("\n",))) == ["ECHO(cfg)"]
    assert context.backend(cfg) is backend  # one backend per model config and process


# ---------------------------------------------------------------- log-probabilities (SmolLM2's tokenizer)

@pytest.mark.model
def test_next_token_logprobs_by_token_id(server):
    backend = backend_for(server, tokenizer="smollm2")
    assert backend.vocab_size == 49152 and backend.eos_token_ids == frozenset({2})
    prompts = ["The capital of France is", "Here is a list"]
    suffix = backend.encode_text(" Paris and")
    rows = backend.next_token_logprobs(prompts, suffix)
    assert rows.shape == (2, 49152) and rows.dtype == np.float32
    for prompt, row in zip(prompts, rows, strict=True):
        ids = backend.tokenizer(prompt).input_ids + suffix
        np.testing.assert_allclose(row, fake_logprobs(ids), atol=1e-5)
    assert server.bodies[-1]["logprobs"] == -1 and server.bodies[-1]["return_tokens_as_token_ids"] is True
    columns = [7, 3, 7, 49151]
    picked = backend.next_token_logprobs(prompts, suffix, token_ids=columns)
    np.testing.assert_array_equal(picked, rows[:, columns])
    assert server.bodies[-1]["logprob_token_ids"] == [3, 7, 49151]  # asked for by id, not the full row
    assert backend.next_token_logprobs([], suffix).shape == (0, 49152)
    calls = len(server.bodies)
    assert backend.next_token_logprobs(prompts, suffix, token_ids=[]).shape == (2, 0)
    assert len(server.bodies) == calls  # nothing to ask the server
    with pytest.raises(ValueError, match="outside the vocabulary"):
        backend.next_token_logprobs(prompts, [49152 * 2])
    with pytest.raises(ValueError, match="nothing to predict"):
        backend.next_token_logprobs([""])


@pytest.mark.model
def test_label_logprobs_by_token_id(server):
    backend = backend_for(server, tokenizer="smollm2")
    labels = [" positive", " negative"]
    ids = [backend.tokenizer(label, add_special_tokens=False).input_ids[0] for label in labels]
    scores = backend.label_logprobs(["Review: great\nSentiment:"], labels)
    assert scores.shape == (1, 2) and scores.dtype == np.float64
    np.testing.assert_allclose(scores[0], fake_logprobs(backend.tokenizer("Review: great\nSentiment:").input_ids)[ids],
                               atol=1e-5)
    with pytest.raises(ValueError, match="first token"):
        backend.label_logprobs(["x"], [" Entity", " Ab", " Abbreviation"])


@pytest.mark.model
def test_a_server_without_token_logprobs_is_a_clear_error():
    with FakeServer(capped=True) as server:
        backend = backend_for(server, tokenizer="smollm2")
        with pytest.raises(UnsupportedCapabilityError, match="token id|return_tokens_as_token_ids") as err:
            backend.next_token_logprobs([SECRET])
        assert SECRET not in chain_text(err.value)
        with pytest.raises(UnsupportedCapabilityError):
            backend.label_logprobs([SECRET], [" yes", " no"])


@pytest.mark.model
def test_a_refused_logprob_request_names_the_missing_capability():
    with FakeServer(refuse_logprobs=True) as server:  # like vLLM with its default --max-logprobs 20
        backend = backend_for(server, tokenizer="smollm2")
        with pytest.raises(UnsupportedCapabilityError, match="max-logprobs") as err:
            backend.next_token_logprobs([SECRET, "two"])
        assert "2 of 2" in str(err.value) and SECRET not in chain_text(err.value)
        assert sum(server.attempts.values()) == 2  # a 400 is not retried


def test_model_compile_is_vllms_eager_mode_switch_and_stays_out_of_artifact_keys():
    def vllm(**kw):
        return ModelConfig(backend="vllm", batch_invariant=False, **kw)

    assert backend_options(vllm(compile=True))["enforce_eager"] is False
    assert backend_options(vllm(compile=False))["enforce_eager"] is True
    assert "enforce_eager" not in backend_options(vllm())  # the backend's own default: eager on CPU only
    assert "compile" not in vllm().model_dump() and vllm(compile=True).model_dump()["compile"] is True
    with pytest.raises(ValueError, match="vllm backend only"):
        ModelConfig(compile=True)  # hf
