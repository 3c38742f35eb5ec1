"""The backend protocol every LLM backend implements, and what all backends share.

`GenerationParams` is the one dataclass of generation knobs (like vLLM's `SamplingParams`); `postprocess`
turns raw completions into answers the same way for every backend. Prompts and outputs are private text:
nothing here logs them or puts them into exception messages.
"""

from __future__ import annotations

import math
import operator
import re
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Protocol, runtime_checkable

if TYPE_CHECKING:
    import numpy as np


@dataclass(frozen=True)
class GenerationParams:
    """How to generate: greedy when `temperature == 0`, else sampling with temperature and nucleus `top_p`.

    `stop` strings end an answer (applied after leading whitespace, see `postprocess`); `seed` makes sampling
    reproducible for the same prompts and batch composition. `public_prompts`: no prompt of the call holds a
    private record (zero-shot prompts, public demonstrations), so a batch-invariant backend may still batch them
    with each other: batch invariance (privacy invariant 10) protects private prompts only. `empty_answers`: the
    model may end an answer before its first visible character (otherwise a backend that can keeps it going).
    """

    max_new_tokens: int = 64
    temperature: float = 0.0
    top_p: float = 1.0
    stop: tuple[str, ...] = ()
    seed: int | None = None
    public_prompts: bool = False
    empty_answers: bool = False

    def __post_init__(self) -> None:
        if isinstance(self.max_new_tokens, bool) or not isinstance(self.max_new_tokens, int):
            raise TypeError("max_new_tokens must be an int")
        if self.max_new_tokens < 1:
            raise ValueError(f"max_new_tokens must be >= 1, got {self.max_new_tokens}")
        if not math.isfinite(self.temperature) or self.temperature < 0:
            raise ValueError(f"temperature must be finite and >= 0, got {self.temperature}")
        if not math.isfinite(self.top_p) or not 0.0 < self.top_p <= 1.0:
            raise ValueError(f"top_p must be in (0, 1], got {self.top_p}")
        if isinstance(self.stop, str):
            # A bare string would silently become a tuple of characters.
            raise TypeError("stop must be a tuple of strings, not a string")
        stop = tuple(self.stop)
        if not all(isinstance(s, str) and s for s in stop):
            raise ValueError("stop strings must be non-empty strings")
        object.__setattr__(self, "stop", stop)
        if self.seed is not None and (isinstance(self.seed, bool) or not isinstance(self.seed, int)):
            raise TypeError("seed must be an int or None")

    @property
    def greedy(self) -> bool:
        return self.temperature == 0.0


@runtime_checkable
class Backend(Protocol):
    """An LLM behind one batched call. Outputs come back in input order, already `postprocess`ed.

    Optional capabilities (see `CAPABILITIES`; test with `supports`, demand with `require`):

    - `label_logprobs(prompts, continuations, *, progress=False, variants=1) -> np.ndarray`, shape
      (len(prompts), len(continuations)): the log-softmax over the full vocabulary of the next token after each
      prompt, read at the first token of each continuation (a label as it follows the prompt, e.g.
      `" positive"`; the caller adds the leading space). Continuations must differ in their first token
      (`ValueError` naming the labels otherwise). Classification tasks predict the label with the highest score
      (the local form of the OpenAI `logit_bias` + `max_tokens=1` trick); they cannot run on a backend without
      it. `variants` > 1 says the prompts come in consecutive groups of that many variants of one prompt (the
      same demonstrations), which a backend may score together (their shared prefix computed once); it must
      divide the number of prompts. See `LabelScorer`.
    - `next_token_logprobs(prompts, suffix=(), *, token_ids=None, cache=True) -> np.ndarray`, shape
      (len(prompts), vocab_size): the log-softmax over the full vocabulary of the next token after each
      `prompt + suffix`, where `suffix` is a list of token ids shared by all prompts (the tokens generated so
      far); with `vocab_size`, `eos_token_ids`, `decode` and `encode_text`. Token-level methods (DPS-MOZO,
      AdaPMixED, DP few-shot generation) decode one token at a time from these rows; a backend may keep the
      prompts' KV caches between calls so that each step feeds only the new tokens. See `TokenScorer`.
    """

    name: str

    def generate(
        self, prompts: Sequence[str], params: GenerationParams, *, progress: bool = False
    ) -> list[str]: ...

    def close(self) -> None: ...


@runtime_checkable
class LabelScorer(Protocol):
    """The optional `label_logprobs` capability of a `Backend` (documented there)."""

    def label_logprobs(
        self, prompts: Sequence[str], continuations: Sequence[str], *, progress: bool = False, variants: int = 1
    ) -> np.ndarray: ...


@runtime_checkable
class TokenScorer(Protocol):
    """The optional `next_token_logprobs` capability of a `Backend`: next-token distributions of a prompt set
    that shares one generated suffix, for decoding one token at a time.

    `next_token_logprobs(prompts, suffix, *, token_ids=None, cache=True)` returns a float32 array of shape
    (len(prompts), vocab_size), rows in input order: the log-softmax over the full vocabulary (computed in
    float32) of the next token after `prompt + suffix` for each prompt. `suffix` holds token ids (the tokens
    generated so far, the same for every prompt; `encode_text` makes them from text). With `token_ids`, only
    those columns come back, shape (len(prompts), len(token_ids)): still normalized over the full vocabulary,
    then selected. No prompts give shape (0, vocab_size) (or (0, len(token_ids))). A bare string for `prompts`
    is a `TypeError`; a token id outside the vocabulary a `ValueError`.

    `cache=True` lets the backend keep the prompts' state (KV caches) so that the next call with the same
    prompts and a suffix extending this one costs only the new tokens; give `cache=False` for one-off prompt
    sets (prompts that change every step), which should not push the persistent ones out.

    `vocab_size` is the model's output dimension (the width of a full row); `eos_token_ids` the token ids that
    end a generation; `decode` turns token ids into text (special tokens skipped); `encode_text` turns a
    continuation into token ids (no special tokens added).
    """

    vocab_size: int
    eos_token_ids: frozenset[int]

    def next_token_logprobs(
        self,
        prompts: Sequence[str],
        suffix: Sequence[int] = (),
        *,
        token_ids: Sequence[int] | None = None,
        cache: bool = True,
    ) -> np.ndarray: ...

    def decode(self, token_ids: Sequence[int]) -> str: ...

    def encode_text(self, text: str) -> list[int]: ...


# Optional backend methods -> what they are needed for (for error messages).
CAPABILITIES = {
    "label_logprobs": "classification tasks, which score each label's first token after the prompt",
    "next_token_logprobs": "token-level methods (dps-mozo, adapmixed, dp-fewshot), which decode one token at a "
    "time from many prompts' next-token distributions",
}


class UnsupportedCapabilityError(TypeError):
    """A backend lacks an optional capability that the configured task needs."""


def supports(backend: object, capability: str) -> bool:
    """Whether `backend` has the optional method `capability` (one of `CAPABILITIES`)."""
    if capability not in CAPABILITIES:
        raise ValueError(f"unknown backend capability {capability!r}; known: {', '.join(CAPABILITIES)}")
    return callable(getattr(backend, capability, None))


def require(backend: object, capability: str) -> None:
    """Raise `UnsupportedCapabilityError` (naming the backend and what needs it) unless `supports` holds."""
    if not supports(backend, capability):
        name = getattr(backend, "name", type(backend).__name__)
        raise UnsupportedCapabilityError(
            f"backend {name!r} has no {capability}(), which {CAPABILITIES[capability]} need; "
            "use a backend that provides it (the 'hf' backend does)")


class BatchDependenceError(ValueError):
    """A backend that cannot make teacher outputs batch invariant was asked to (privacy invariant 10)."""


def batch_dependence_message(backend: str) -> str:
    """Why `backend` is refused unless batch invariance is given up explicitly (shared with the backends)."""
    how = ("vLLM batches prompts continuously and shares a prefix cache between them" if backend == "vllm" else
           "the server batches concurrent requests as it likes")
    return (f"the {backend!r} backend cannot guarantee batch-invariant teacher outputs ({how}): one teacher's "
            "output may depend on the other prompts it is batched with, so one private record could change "
            "more than one teacher's output, beyond the sensitivity the noise is calibrated to. Use the 'hf' "
            "backend, or accept this explicitly with `model.batch_invariant: false` (batch_invariant=False; "
            "docs/PRIVACY.md)")


def refuse_batch_dependence(backend: str, batch_invariant: bool) -> None:
    """Raise `BatchDependenceError` unless the caller gave up batch invariance explicitly
    (`batch_invariant=False`), and log a warning when it is given up."""
    if not isinstance(batch_invariant, bool):
        raise TypeError("batch_invariant must be a bool")
    if batch_invariant:
        raise BatchDependenceError(batch_dependence_message(backend))
    import logging

    logging.getLogger("dpicl.inference").warning(
        "backend %r with batch_invariant=False: teacher outputs may depend on the other prompts of a batch "
        "(docs/PRIVACY.md)", backend)


class ModelNotAvailableError(RuntimeError):
    """A model the configuration names is not installed locally (we never download at run time)."""


def postprocess(text: str, stop: Sequence[str], *, truncated: bool = False) -> str:
    """Strip leading whitespace, cut at the earliest stop string, strip again; a completion the token limit
    `truncated` (no stop string, no EOS) ends at a sentence boundary (`whole_sentences`).

    Leading whitespace goes first: small models often open a completion with a newline, and a `"\\n"` stop
    would otherwise cut every answer to nothing (docs/STACK.md).
    """
    text = text.lstrip()
    cut = len(text)
    for s in stop:
        i = text.find(s)
        if 0 <= i < cut:
            cut = i
    stopped = cut < len(text)
    text = text[:cut].strip()
    return whole_sentences(text) if truncated and not stopped else text


# A sentence ends at . ! ? or … (closing quotes or brackets may follow) before whitespace or the end: not the dots
# inside "7.3.0" or "e.g" followed by a letter.
_SENTENCE_END = re.compile(r"[.!?\u2026][\"')\]\u201d\u2019]*(?=\s|$)")
_LAST_WORD = re.compile(r"\s*\S+$")
# Words a sentence cannot end on: what is left of a fragment once its cut-off tail is gone.
_DANGLING = frozenset(
    "a an the and or but nor so of to in on at for from with by as into onto about than that which who whom whose "
    "is are was were be been being has have had will would can could should may might must do does did not "
    "his her their its our your my this these those".split()
)
MIN_SENTENCE_WORDS = 3


def whole_sentences(text: str) -> str:
    """`text`, cut off by a token limit, ended at a sentence boundary.

    It keeps everything up to its last complete sentence of at least `MIN_SENTENCE_WORDS` words. A text with no
    such sentence (one long sentence cut off) loses its last word, which may be cut mid-word, and the words a
    sentence cannot end on ("the", "of", "and", …), and is closed with a period. Never empty if `text` is not.
    """
    text = text.strip()
    if _ends_sentence(text):
        return text
    ends = [m.end() for m in _SENTENCE_END.finditer(text) if len(text[: m.end()].split()) >= MIN_SENTENCE_WORDS]
    if ends:
        return text[: ends[-1]]
    fragment = _LAST_WORD.sub("", text)
    while fragment and fragment.split()[-1].strip(",;:-\u2013\u2014").lower() in _DANGLING:
        fragment = _LAST_WORD.sub("", fragment)
    fragment = fragment.rstrip(",;:-\u2013\u2014 ")
    if not fragment:
        return text
    return fragment if _ends_sentence(fragment) else f"{fragment}."


def _ends_sentence(text: str) -> bool:
    return any(m.end() == len(text) for m in _SENTENCE_END.finditer(text))


def has_stop(text: str, stop: Sequence[str]) -> bool:
    """Whether `postprocess` would cut `text` at a stop string (the test generation stops on)."""
    text = text.lstrip()
    return any(s in text for s in stop)


def check_variants(prompts: int, variants: int) -> None:
    """`label_logprobs`' `variants`: at least 1, and a divisor of the number of prompts (whole groups)."""
    if isinstance(variants, bool) or not isinstance(variants, int) or variants < 1 or prompts % variants:
        raise ValueError(f"variants must be an int >= 1 that divides the number of prompts ({prompts}), "
                         f"got {variants!r}")


def token_id_tuple(ids: Sequence[int], limit: int, what: str) -> tuple[int, ...]:
    """`ids` as a tuple of ints in [0, limit). Only an id outside the vocabulary, which is no text, is named."""
    import numpy as np

    if isinstance(ids, (str, bytes)):
        raise TypeError(f"{what} must be a sequence of token ids, not a string")
    out = []
    for token in ids:
        if isinstance(token, (bool, np.bool_)):
            raise TypeError(f"{what} must hold integer token ids, got a bool")
        try:
            token = operator.index(token)
        except TypeError:
            raise TypeError(f"{what} must hold integer token ids, got {type(token).__name__}") from None
        if not 0 <= token < limit:
            raise ValueError(f"{what} holds the token id {token}, outside the vocabulary [0, {limit})")
        out.append(token)
    return tuple(out)


class TokenizerText:
    """`encode_text` and `decode` of a backend that holds a Hugging Face tokenizer as `self.tokenizer`."""

    tokenizer: Any

    def encode_text(self, text: str) -> list[int]:
        """The token ids of a continuation `text` (no special tokens added), e.g. for a `suffix`."""
        if not isinstance(text, str):
            raise TypeError(f"text must be a string, got {type(text).__name__}")
        return list(self.tokenizer(text, add_special_tokens=False).input_ids) if text else []

    def decode(self, token_ids: Sequence[int]) -> str:
        """The text of `token_ids`, special tokens skipped."""
        ids = token_id_tuple(token_ids, len(self.tokenizer), "token_ids")
        return self.tokenizer.decode(list(ids), skip_special_tokens=True)
