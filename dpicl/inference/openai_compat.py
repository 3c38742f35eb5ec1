"""The `openai` backend: any OpenAI-compatible server (e.g. `vllm serve`) through `/v1/completions`.

Requests go through the official `openai` SDK: its client sends them, retries transient failures (connection
errors, timeouts, HTTP 408, 409, 429 and 5xx) with exponential back-off (0.5 s doubling to 8 s, with jitter; a
`Retry-After` header wins) and fails at once on any other 4xx. A batch is sent as concurrent requests, one prompt
each (each needs its own seed), at most `max_concurrency` in flight (the server batches what arrives together);
outputs come back in input order. vLLM's own request fields go in the SDK's `extra_body`. Prompts and outputs are
private text: errors name counts, status codes and the URL, never a prompt, an output or a response body (the
SDK's own errors quote the body, so none of them leaves this module).

`label_logprobs` and `next_token_logprobs` need a server that returns the log-probabilities of chosen tokens
(`logprob_token_ids`, vLLM) or of the full vocabulary (`logprobs=-1` with `return_tokens_as_token_ids`; vLLM
started with `--max-logprobs -1`), and a local copy of the model's tokenizer (`tokenizer`, default: `model` as a
local directory or embedded name). A server without them raises `UnsupportedCapabilityError`.

The helpers at the top (row seeds, label tokens, stops in leading whitespace) are shared with the `vllm` backend.
"""

from __future__ import annotations

import logging
import os
import threading
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import numpy as np

from dpicl.inference.base import (
    GenerationParams,
    TokenizerText,
    UnsupportedCapabilityError,
    check_variants,
    postprocess,
    refuse_batch_dependence,
    token_id_tuple,
)
from dpicl.progress import track

log = logging.getLogger(__name__)

DEFAULT_BASE_URL = "http://127.0.0.1:8000/v1"
DEFAULT_API_KEY_ENV = "DPICL_OPENAI_API_KEY"
# vLLM's cap on `logprob_token_ids` (vllm.sampling_params.MAX_LOGPROB_TOKEN_IDS); wider selections use the full row.
MAX_SELECTED_IDS = 128
# the request fields `client.completions.create` takes by name; the rest (vLLM's) travel in `extra_body`
SDK_FIELDS = frozenset({"model", "prompt", "max_tokens", "n", "temperature", "top_p", "seed", "stop", "logprobs"})
# statuses the SDK retries below 500: a failure with one of them means it gave up
RETRIED_STATUSES = frozenset({408, 409, 429})


# ---------------------------------------------------------------- helpers shared with the vllm backend

def row_seeds(seed: int | None, n: int, round_: int = 0) -> list[int | None]:
    """One seed per prompt, derived from `seed` and the prompt's position (and the generation round).

    Servers seed each request on its own: one seed for all would give identical prompts (ESA's candidates) the
    same sample. Derived seeds keep a seeded call reproducible for the same prompts and batch composition.
    """
    if seed is None:
        return [None] * n
    state = np.random.SeedSequence([seed, round_]).generate_state(n, dtype=np.uint64)
    return [int(s) & (2**62 - 1) for s in state]


def stopped_in_leading_whitespace(text: str, finish_reason: object, stop_reason: object,
                                  stop: Sequence[str]) -> bool:
    """Whether a server stopped at a stop string inside the completion's leading whitespace.

    `postprocess` strips leading whitespace before it looks for stops (small models often open with a newline,
    docs/STACK.md), but a server stops at the first stop string anywhere. A completion cut there must be generated
    again without server-side stops; any other cut gives the same answer after `postprocess`. `stop_reason` is the
    stop string that ended it (vLLM; None for EOS); `UNKNOWN` for servers that do not say, which only costs a
    second request for blank completions.
    """
    if not stop or text.strip() or finish_reason != "stop":
        return False
    return stop_reason is UNKNOWN or isinstance(stop_reason, str)


UNKNOWN = object()


def label_first_tokens(tokenizer: Any, continuations: Sequence[str]) -> list[int]:
    """The first token id of each label continuation (" positive": the caller adds the space), distinct and
    non-empty: every backend scores a label by that one token as the next token after a prompt.

    A label of several tokens is scored by its first alone, which may also begin many other words (" Ab" of
    " Abbreviation"): its votes then carry that prior, and the majority can collapse onto it (TREC with SmolLM2:
    2 % accuracy uncalibrated, docs/BENCHMARKS.md). That is logged once per label as a warning, with the remedies.
    Labels are public configuration, so the messages name them.
    """
    if isinstance(continuations, str):
        raise TypeError("continuations must be a sequence of strings, not a string")
    if not continuations:
        raise ValueError("no continuations given; give at least one label string")
    first: dict[int, str] = {}
    for text in continuations:
        if not isinstance(text, str):
            raise TypeError(f"continuations must be strings, got {type(text).__name__}")
        tokens = tokenizer(text, add_special_tokens=False).input_ids if text else []
        if not tokens:
            raise ValueError(f"label continuation {text!r} is empty (no tokens); give every label a non-empty "
                             "string such as ' positive'")
        head = tokenizer.decode(tokens[:1])
        if tokens[0] in first:
            raise ValueError(f"labels {first[tokens[0]]!r} and {text!r} start with the same token {head!r}, so "
                             "their scores cannot be told apart; rename one of them so the labels differ in their "
                             "first token")
        if len(tokens) > 1 and text not in _WARNED_LABELS:
            _WARNED_LABELS.add(text)
            log.warning("label %r is scored by its first token %r alone (of %d), which may begin other words too: "
                        "its votes carry their prior unless task.calibrate is true; a label word of one token "
                        "avoids it", text, head, len(tokens))
        first[tokens[0]] = text
    return list(first)


_WARNED_LABELS: set[str] = set()  # each multi-token label's warning once per process


def missing_bos_id(tokenizer: Any, model_type: str) -> int | None:
    """The BOS id to prepend ourselves, or None (the rule of `HFBackend._missing_bos_id`: Gemma needs `<bos>`
    and its tokenizer does not add it; SmolLM2's "bos" is a chat token and never prepended)."""
    bos = tokenizer.bos_token_id
    if bos is None or tokenizer("a").input_ids[:1] == [bos]:
        return None
    wanted = tokenizer.init_kwargs.get("add_bos_token")
    if wanted is None:
        wanted = model_type.startswith("gemma")
    return bos if wanted else None


def check_prompts(prompts: Sequence[str]) -> tuple[str, ...]:
    if isinstance(prompts, str):
        raise TypeError("prompts must be a sequence of strings, not a string")
    key = tuple(prompts)
    if not all(isinstance(p, str) for p in key):
        raise TypeError("prompts must be strings")
    return key


# ---------------------------------------------------------------- the backend

class OpenAICompatError(RuntimeError):
    """A request to the server failed; the message holds counts, the status and the URL, never private text."""

    def __init__(self, message: str, status: int | None = None) -> None:
        super().__init__(message)
        self.status = status


class OpenAIBackend(TokenizerText):
    """Completions from an OpenAI-compatible server at `base_url` (ending in `/v1`), model name `model` as the
    server knows it (`vllm serve DIR --served-model-name smollm2`).

    The API key is read from the environment variable `api_key_env` (never from config, never from
    `OPENAI_API_KEY`: a key for OpenAI's service must not travel to a self-hosted server; no key, no header).
    `device`, `dtype`, `threads` and `batch_size` are the server's business and accepted only so that one config
    can switch backends. `tokenizer` (a local model directory or an embedded name) is loaded on first use by the
    log-probability methods.

    The server batches concurrent requests as it likes (and may share a prefix cache between them), so this
    backend is not batch invariant (privacy invariant 10): it raises `BatchDependenceError` unless
    `batch_invariant=False` accepts that explicitly (docs/PRIVACY.md).
    """

    name = "openai"

    def __init__(
        self,
        model: str = "smollm2",
        base_url: str = DEFAULT_BASE_URL,
        *,
        api_key_env: str = DEFAULT_API_KEY_ENV,
        timeout: float = 120.0,
        max_concurrency: int = 8,
        max_retries: int = 4,
        tokenizer: str | None = None,
        device: str = "auto",
        dtype: str = "float32",
        threads: int | None = None,
        batch_size: int = 16,
        batch_invariant: bool = True,
    ) -> None:
        refuse_batch_dependence("openai", batch_invariant)
        from openai import Omit, OpenAI

        if max_concurrency < 1:
            raise ValueError(f"max_concurrency must be >= 1, got {max_concurrency}")
        if max_retries < 0:
            raise ValueError(f"max_retries must be >= 0, got {max_retries}")
        if timeout <= 0:
            raise ValueError(f"timeout must be > 0 seconds, got {timeout}")
        self.model = model
        self.base_url = base_url.rstrip("/")
        self.url = f"{self.base_url}/completions"
        self.max_concurrency = max_concurrency
        self.max_retries = max_retries
        self._tokenizer_spec = tokenizer or model
        self._tokenizer = None
        self._tokenizer_lock = threading.Lock()
        self._vocab_size: int | None = None
        key = os.environ.get(api_key_env, "")
        # The key is given as a provider (a callable), so the SDK accepts an empty one instead of reading
        # OPENAI_API_KEY; an empty admin key stops it reading OPENAI_ADMIN_KEY. Without a key every request omits
        # the header (the SDK wants that said per request).
        self._client = OpenAI(api_key=lambda: key, admin_api_key="", base_url=self.base_url, timeout=timeout,
                              max_retries=max_retries)
        self._headers = None if key else {"Authorization": Omit()}
        self._pool: ThreadPoolExecutor | None = ThreadPoolExecutor(max_concurrency, thread_name_prefix="dpicl-openai")

    # ------------------------------------------------------------ requests

    def _post(self, body: dict) -> dict:
        """One completion request (the SDK retries transient failures); the response as a plain dict, vLLM's extra
        fields (`stop_reason`, token-id keys) included. Fields the SDK does not know go in `extra_body`."""
        import openai

        known = {k: v for k, v in body.items() if k in SDK_FIELDS}
        extra = {k: v for k, v in body.items() if k not in SDK_FIELDS}
        try:
            return self._client.completions.create(**known, extra_body=extra or None,
                                                  extra_headers=self._headers).model_dump()
        except openai.APIStatusError as err:  # its message quotes the response body: never shown
            status = err.status_code
            if status in RETRIED_STATUSES or status >= 500:
                raise OpenAICompatError(f"HTTP {status} from {self.url}; gave up after {self.max_retries + 1} "
                                        "attempts", status) from None
            raise OpenAICompatError(f"HTTP {status} from {self.url} (not retried: a client error)", status) from None
        except openai.APIConnectionError as err:  # timeouts included
            raise OpenAICompatError(f"{type(err).__name__} from {self.url}; gave up after {self.max_retries + 1} "
                                    "attempts") from None
        except openai.APIResponseValidationError:
            raise OpenAICompatError(f"the response from {self.url} is not a completion") from None
        except openai.OpenAIError as err:  # any other SDK error: its message may quote a body too
            raise OpenAICompatError(f"{type(err).__name__} from {self.url}") from None

    def _map(self, fn: Callable[[int], Any], n: int, *, progress: bool = False, what: str = "requests") -> list:
        """`fn(i)` for i in range(n), at most `max_concurrency` at a time; results in input order."""
        if self._pool is None:
            raise RuntimeError("this backend has been closed")
        futures = [self._pool.submit(fn, i) for i in range(n)]
        results: list = [None] * n
        failed: list[int] = []
        first: BaseException | None = None
        for i, future in enumerate(track(futures, what, enabled=progress)):
            try:
                results[i] = future.result()
            except Exception as err:  # noqa: BLE001 (collected, re-raised below without private text)
                failed.append(i)
                first = first or err
        if first is not None:
            if isinstance(first, (OpenAICompatError, UnsupportedCapabilityError)):
                raise type(first)(f"{len(failed)} of {n} {what} failed; first: {first}") from None
            raise first
        return results

    def _body(self, prompt: str | list[int], **fields: Any) -> dict:
        return {"model": self.model, "prompt": prompt, **fields}

    # ------------------------------------------------------------ generate

    def generate(self, prompts: Sequence[str], params: GenerationParams, *, progress: bool = False) -> list[str]:
        prompts = check_prompts(prompts)
        if not prompts:
            return []
        seeds = row_seeds(params.seed, len(prompts))
        redo_seeds = row_seeds(params.seed, len(prompts), round_=1)

        def one(i: int) -> str:
            choice = self._complete(prompts[i], params, seeds[i], params.stop)
            text, finish = choice.get("text") or "", choice.get("finish_reason")
            if stopped_in_leading_whitespace(text, finish, choice.get("stop_reason", UNKNOWN), params.stop):
                choice = self._complete(prompts[i], params, redo_seeds[i], ())
            return postprocess(choice.get("text") or "", params.stop, truncated=choice.get("finish_reason") == "length")

        return self._map(one, len(prompts), progress=progress, what="completions")

    def _complete(self, prompt: str, params: GenerationParams, seed: int | None, stop: Sequence[str]) -> dict:
        fields: dict[str, Any] = {"max_tokens": params.max_new_tokens, "n": 1}
        if params.greedy:
            fields.update(temperature=0.0, top_p=1.0)
        else:
            fields.update(temperature=params.temperature, top_p=params.top_p)
        if seed is not None:
            fields["seed"] = seed
        if stop:
            fields["stop"] = list(stop)
        return _first_choice(self._post(self._body(prompt, **fields)), self.url)

    # ------------------------------------------------------------ log-probabilities

    @property
    def tokenizer(self):
        """The model's tokenizer, loaded from a local directory on first use (the server has its own copy)."""
        with self._tokenizer_lock:
            if self._tokenizer is None:
                from transformers import AutoConfig, AutoTokenizer

                from dpicl.inference.models import resolve_llm

                path = resolve_llm(self._tokenizer_spec)
                tokenizer = AutoTokenizer.from_pretrained(path, local_files_only=True)
                config = AutoConfig.from_pretrained(path, local_files_only=True)
                text_config = config.get_text_config() if hasattr(config, "get_text_config") else config
                self._vocab_size = int(text_config.vocab_size)
                self._bos_id = missing_bos_id(tokenizer, str(getattr(config, "model_type", "")))
                eos = {tokenizer.eos_token_id, getattr(text_config, "eos_token_id", None)}
                self._eos = frozenset(int(e) for x in eos if x is not None for e in (x if isinstance(x, list) else [x]))
                self._tokenizer = tokenizer
            return self._tokenizer

    @property
    def vocab_size(self) -> int:
        self.tokenizer  # noqa: B018 (loads the model config)
        return self._vocab_size  # type: ignore[return-value]

    @property
    def eos_token_ids(self) -> frozenset[int]:
        self.tokenizer  # noqa: B018
        return self._eos

    def _encode(self, prompt: str) -> list[int]:
        ids = list(self.tokenizer(prompt).input_ids)
        return [self._bos_id, *ids] if self._bos_id is not None else ids

    def label_logprobs(self, prompts: Sequence[str], continuations: Sequence[str], *,
                       progress: bool = False, variants: int = 1) -> np.ndarray:
        """Log-probabilities, shape (len(prompts), len(continuations)), of each continuation's first token as the
        next token after each prompt (see `base.Backend`). `variants` is the server's affair: vLLM's prefix
        caching computes a shared prefix once."""
        prompts = check_prompts(prompts)
        check_variants(len(prompts), variants)
        label_ids = label_first_tokens(self.tokenizer, continuations)
        rows = self._next_token_rows(prompts, [[] for _ in prompts], label_ids, progress, "label logprobs")
        return rows.astype(np.float64)

    def next_token_logprobs(self, prompts: Sequence[str], suffix: Sequence[int] = (), *,
                            token_ids: Sequence[int] | None = None, cache: bool = True) -> np.ndarray:
        """Next-token log-probabilities after `prompt + suffix` (see `base.TokenScorer`). `cache` is the server's
        affair: vLLM's prefix caching reuses the prompts' KV blocks across calls."""
        prompts = check_prompts(prompts)
        fed = list(token_id_tuple(suffix, len(self.tokenizer), "suffix"))
        columns = None if token_ids is None else list(token_id_tuple(token_ids, self.vocab_size, "token_ids"))
        width = self.vocab_size if columns is None else len(columns)
        if not prompts or width == 0:
            return np.empty((len(prompts), width), dtype=np.float32)
        return self._next_token_rows(prompts, [fed] * len(prompts), columns, False, "next-token logprobs")

    def _next_token_rows(self, prompts: tuple[str, ...], suffixes: list[list[int]], columns: list[int] | None,
                         progress: bool, what: str) -> np.ndarray:
        vocab = self.vocab_size
        inputs = [[*self._encode(p), *s] for p, s in zip(prompts, suffixes, strict=True)]
        for i, row in enumerate(inputs):
            if not row:
                raise ValueError(f"prompt {i} has no tokens and the suffix is empty: there is nothing to predict "
                                 "the next token from")
        # A small selection is asked for by id (vLLM's `logprob_token_ids`); otherwise the full row.
        selected = columns is not None and 0 < len(set(columns)) <= MAX_SELECTED_IDS
        wanted = sorted(set(columns)) if selected else None
        fields: dict[str, Any] = {"max_tokens": 1, "temperature": 0.0, "return_tokens_as_token_ids": True}
        fields.update(logprobs=len(wanted), logprob_token_ids=wanted) if selected else fields.update(logprobs=-1)

        def one(i: int) -> np.ndarray:
            try:
                choice = _first_choice(self._post(self._body(inputs[i], **fields)), self.url)
            except OpenAICompatError as err:
                if err.status != 400:
                    raise
                raise UnsupportedCapabilityError(
                    f"the server at {self.url} refused a log-probability request (HTTP 400): it may cap `logprobs` "
                    "(vLLM: start it with `--max-logprobs -1`) or lack `logprob_token_ids` / "
                    "`return_tokens_as_token_ids`, which the openai backend's label and token-level methods need"
                ) from None
            row = _logprob_row(choice, vocab, self.url)
            missing = np.isnan(row[wanted] if selected else row)
            if missing.any():
                raise UnsupportedCapabilityError(
                    f"the server at {self.url} returned log-probabilities for {int((~missing).sum())} of the "
                    f"{missing.size} tokens asked for; the openai backend needs a server that returns chosen tokens' "
                    "log-probabilities (vLLM: `logprob_token_ids`) or the full vocabulary (vLLM started with "
                    "`--max-logprobs -1`)")
            return row

        rows = np.vstack(self._map(one, len(prompts), progress=progress, what=what)) if prompts \
            else np.empty((0, vocab), dtype=np.float32)
        return rows if columns is None else np.ascontiguousarray(rows[:, columns])

    def close(self) -> None:
        if self._pool is not None:
            self._pool.shutdown(wait=True)
            self._pool = None
        self._client.close()


def _first_choice(payload: dict, url: str) -> dict:
    try:
        return payload["choices"][0]
    except (KeyError, IndexError, TypeError):
        raise OpenAICompatError(f"the response from {url} has no choices") from None


def _logprob_row(choice: dict, vocab: int, url: str) -> np.ndarray:
    """The first generated position's log-probabilities as a float32 row, NaN where the server gave none.

    `/v1/completions` keys `top_logprobs` by token; with `return_tokens_as_token_ids` a key is "token_id:123".
    A server that ignores that flag keys them by text, which cannot be mapped back to ids reliably.
    """
    try:
        top = choice["logprobs"]["top_logprobs"][0]
    except (KeyError, IndexError, TypeError):
        top = None
    if not isinstance(top, dict):
        raise UnsupportedCapabilityError(
            f"the server at {url} returned no log-probabilities; the openai backend needs `logprobs` in "
            "/v1/completions (label and token-level methods cannot run on this server)")
    row = np.full(vocab, np.nan, dtype=np.float32)
    ids, values = [], []
    for key, value in top.items():
        if not (isinstance(key, str) and key.startswith("token_id:")):
            raise UnsupportedCapabilityError(
                f"the server at {url} keys log-probabilities by text, not token id; the openai backend needs "
                "`return_tokens_as_token_ids` (vLLM)")
        token = int(key[len("token_id:"):])
        if 0 <= token < vocab:
            ids.append(token)
            values.append(value)
    row[np.asarray(ids, dtype=np.int64)] = np.asarray(values, dtype=np.float32)
    return row
