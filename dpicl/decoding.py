"""Token-level private decoding loops (docs/ARCHITECTURE.md, "One query through `answer_backlog`"): per generated
token one batched call to the backend's `next_token_logprobs` (KV caches kept for the prompts that stay the
same), one mechanism step on the next-token distributions, one released token appended to every sequence.

Orchestration only: the mechanisms live in `dpicl.privacy.mechanisms` (dps_mozo, adapmixed, dp_fewshot). The
prompts are private text and stay inside these functions; what they return besides the answer is numbers.
Decoding stops at EOS, at a stop string (checked on the released text, i.e. on DP output), or after
`max_new_tokens` tokens; the caller has reserved the cost of `max_new_tokens` tokens before.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

import numpy as np

from dpicl.inference.base import has_stop, postprocess
from dpicl.privacy.mechanisms import adapmixed, dp_fewshot, dps_mozo


@dataclass
class Decoded:
    """A privately decoded text and numbers about how it was made (never private text): `info` is computed from
    DP outputs only and may be released; `private` is computed from private data (e.g. the λ's, AdaPMixED's
    data-dependent RDP) and must stay in DuckDB as a private artifact."""

    text: str
    tokens: list[int]
    info: dict = field(default_factory=dict)
    private: dict = field(default_factory=dict)


def _decode_loop(backend, max_new_tokens: int, stop: Sequence[str],
                 next_token: Callable[[list[int]], int]) -> tuple[str, list[int], int]:
    """Append `next_token(suffix)` until EOS, a stop string in the released text, or `max_new_tokens`; returns
    the text, its tokens and the number of mechanism steps (the EOS step included)."""
    suffix: list[int] = []
    steps = 0
    while steps < max_new_tokens:
        token = next_token(suffix)
        steps += 1
        if token in backend.eos_token_ids:
            break
        suffix.append(token)
        if stop and has_stop(backend.decode(suffix), stop):
            break
    else:  # the token limit ended it: the released text is cut at a sentence boundary (post-processing)
        return postprocess(backend.decode(suffix), stop, truncated=True), suffix, steps
    return postprocess(backend.decode(suffix), stop), suffix, steps


def dps_mozo_answer(backend, zero_shot: str, one_shot: Callable[[int], str], n_records: int, *, shots: int,
                    top_k: int, beta: float, alpha: int, max_new_tokens: int, stop: Sequence[str],
                    rng: np.random.Generator) -> Decoded:
    """DPS-MOZO (paper 000 Alg 1): per token, `shots` records drawn without replacement from `n_records`;
    `one_shot(i)` is the one-shot prompt with record i. The zero-shot prompt keeps its KV cache; the one-shot
    prompts change every token and are prefilled each time (the algorithm's cost, not the implementation's)."""
    lambdas: list[float] = []

    def next_token(suffix: list[int]) -> int:
        drawn = dps_mozo.sample_demonstrations(n_records, shots, rng)
        private = backend.next_token_logprobs([one_shot(int(i)) for i in drawn], suffix, cache=False)
        public = backend.next_token_logprobs([zero_shot], suffix)[0]
        token, info = dps_mozo.step(public, private, top_k=top_k, beta=beta, alpha=alpha, rng=rng)
        lambdas.extend(info["lambdas"])
        return token

    text, tokens, steps = _decode_loop(backend, max_new_tokens, stop, next_token)
    return Decoded(text, tokens, {"steps": steps}, {"mean_lambda": float(np.mean(lambdas)) if lambdas else 0.0})


def adapmixed_answer(backend, zero_shot: str, members: Sequence[str], *, beta: float, alpha: int, top_k: int,
                     screen_lambda: float, screen_sigma: float, threshold: float, max_new_tokens: int,
                     stop: Sequence[str], rng: np.random.Generator) -> Decoded:
    """AdaPMixED (paper 003 Alg 1) over the member prompts and the public zero-shot prompt: the same prompts for
    every token, so KV-cached forward passes per token cover them; the public prompt in a call of its own."""
    passed, data_dependent = 0, 0.0
    screen = adapmixed.screen_rdp(alpha, screen_lambda, len(members), screen_sigma)

    def next_token(suffix: list[int]) -> int:
        nonlocal passed, data_dependent
        private = backend.next_token_logprobs(list(members), suffix)
        public = backend.next_token_logprobs([zero_shot], suffix)[0]  # its own call: never batched with private
        token, info = adapmixed.step(private, public, beta=beta, alpha=alpha, top_k=top_k,
                                     screen_lam=screen_lambda, screen_sigma=screen_sigma, threshold=threshold,
                                     rng=rng)
        passed += bool(info.passed)
        # 003's per-token charge: the screen, plus the smaller of Eq. 3 and the bound when the screen passed
        data_dependent += min(info.rdp_bound, screen + info.data_dependent_rdp)
        return token

    text, tokens, steps = _decode_loop(backend, max_new_tokens, stop, next_token)
    # screens passed: post-processing of the noisy screens; 003's data-dependent RDP at order α is computed from
    # private data: kept privately, never spent by (the ledger holds the data-independent bound)
    return Decoded(text, tokens, {"steps": steps, "screens_passed": passed}, {"data_dependent_rdp": data_dependent})


def dp_fewshot_text(backend, public_prompt: str, private_prompts: Callable[[], list[str]], *, mechanism: str,
                    top_k: int, noise_multiplier: float | None, epsilon0: float | None, max_new_tokens: int,
                    stop: Sequence[str], rng: np.random.Generator, fixed_private: bool = False) -> Decoded:
    """DP few-shot generation (paper 002): per token, `private_prompts()` draws a fresh Poisson sample split into
    M prompts; the public prompt (no private data) gives the public vocabulary and keeps its KV cache.
    `fixed_private`: `private_prompts()` returns the same prompts at every step (membership inference forces its
    target into them), so their KV caches are kept too."""

    def next_token(suffix: list[int]) -> int:
        private = backend.next_token_logprobs(private_prompts(), suffix, cache=fixed_private)
        public = backend.next_token_logprobs([public_prompt], suffix)[0]
        return dp_fewshot.step(private, public, top_k=top_k, mechanism=mechanism, noise_multiplier=noise_multiplier,
                               epsilon0=epsilon0, rng=rng)

    text, tokens, steps = _decode_loop(backend, max_new_tokens, stop, next_token)
    return Decoded(text, tokens, {"steps": steps})
