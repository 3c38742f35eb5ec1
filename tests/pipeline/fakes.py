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

    def label_logprobs(self, prompts, continuations, *, progress=False):
        """Log-probabilities that favour one label per prompt, chosen by a hash of the prompt."""
        self.calls.append((len(prompts), -1.0))
        scores = np.full((len(prompts), len(continuations)), -5.0)
        for i, p in enumerate(prompts):
            scores[i, int(hashlib.sha256(p.encode()).hexdigest(), 16) % len(continuations)] = -0.1
        return scores

    def close(self):
        pass


class FakeEncoder:
    dim = 16

    def encode(self, texts, progress=False):
        vectors = np.zeros((len(texts), self.dim), np.float32)
        for i, t in enumerate(texts):
            seed = int.from_bytes(hashlib.sha256(t.encode()).digest()[:8], "big")
            v = np.random.default_rng(seed).normal(size=self.dim)
            vectors[i] = v / np.linalg.norm(v)
        return vectors
