"""Deterministic stand-ins for the LLM and the encoder, so pipeline tests run in seconds."""

from __future__ import annotations

import hashlib

import numpy as np


class FakeBackend:
    name = "fake"

    def __init__(self) -> None:
        self.calls: list[tuple[int, float]] = []  # (prompts, temperature) per call

    def generate(self, prompts, params, *, progress=False):
        self.calls.append((len(prompts), params.temperature))
        out = []
        for i, p in enumerate(prompts):
            digest = hashlib.sha256(p.encode()).hexdigest()[:6]
            # sampled calls differ per position, greedy ones depend on the prompt only
            out.append(f"summary {digest}" if params.temperature == 0 else f"candidate {i % 5} {digest[:2]}")
        return out

    def label_logprobs(self, prompts, continuations, *, progress=False, variants=1):
        """Log-probabilities that favour one label per prompt, chosen by a hash of the prompt."""
        self.calls.append((len(prompts), -1.0))
        scores = np.full((len(prompts), len(continuations)), -5.0)
        for i, p in enumerate(prompts):
            scores[i, int(hashlib.sha256(p.encode()).hexdigest(), 16) % len(continuations)] = -0.1
        return scores

    # token-level capability: a 40-token vocabulary, id 0 is EOS, id 1 a newline, others the words "t2".."t39"
    vocab_size = 40
    eos_token_ids = frozenset({0})

    def next_token_logprobs(self, prompts, suffix=(), *, token_ids=None, cache=True):
        """Log-probabilities peaked on a token chosen by a hash of the prompt (and the suffix length); EOS after
        six tokens."""
        if isinstance(prompts, str):
            raise TypeError("prompts must be a sequence of strings")
        self.calls.append((len(prompts), -2.0))
        out = np.full((len(prompts), self.vocab_size), -6.0)
        for i, p in enumerate(prompts):
            favourite = 2 + int(hashlib.sha256(f"{p}|{len(suffix)}".encode()).hexdigest(), 16) % (self.vocab_size - 2)
            out[i, favourite] = 0.0
            out[i, 0] = 0.0 if len(suffix) >= 6 else -8.0
            out[i] -= np.log(np.exp(out[i]).sum())
        return (out if token_ids is None else out[:, list(token_ids)]).astype(np.float32)

    def decode(self, token_ids):
        return " ".join("\n" if t == 1 else f"t{t}" for t in token_ids if t != 0)

    def encode_text(self, text):
        return [1 if w == "\n" else int(w[1:]) for w in text.split()]

    def close(self):
        pass


class FakeEncoder:
    dim = 16
    batch_invariant = True  # each text's vector depends on that text alone

    def encode(self, texts, progress=False, batched=False):
        vectors = np.zeros((len(texts), self.dim), np.float32)
        for i, t in enumerate(texts):
            seed = int.from_bytes(hashlib.sha256(t.encode()).digest()[:8], "big")
            v = np.random.default_rng(seed).normal(size=self.dim)
            vectors[i] = v / np.linalg.norm(v)
        return vectors
