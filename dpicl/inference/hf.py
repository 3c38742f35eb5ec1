"""The `hf` backend: generation with transformers, on CPU by default and on CUDA when present.

Batch invariance (privacy invariant 10, docs/PRIVACY.md). By default (`batch_invariant=True`) every
prompt runs in its own forward passes: its own shape, no padding, its own KV cache, and (seeded sampling) its own
random stream, seeded from the call's seed and its position. So each output, down to the bits of every float, is
a function of its own prompt alone (and of public quantities: the model, the parameters, the position), never of
the other prompts of the call. This matters because floating-point results depend on the batch's shape: in a
padded batch, adding one record to one teacher's prompt (a longer prompt, so more padding for the others) changes
the other teachers' logits in the last bits, and sometimes their greedy tokens, which would break the sensitivity
bound "one record changes one teacher's output" and the amplification by subsampling.

`batch_invariant=False` (config `model.batch_invariant: false`) is the faster batched path, with that privacy
caveat: prompts are tokenized once, sorted by length into micro-batches of `batch_size` (little padding),
left-padded (decoder-only models continue from the right end), generated, and returned in input order.
Generation of a sequence ends at EOS, at `max_new_tokens`, or as soon as it contains a stop string after its
leading whitespace.

`label_logprobs` scores classification labels the same way (the optional capability of `base.Backend`): one
forward pass per micro-batch, and the next-token log-probabilities at the last (prediction) position, read at
the first token of each label: the local form of the OpenAI `logit_bias` + `max_tokens=1` trick (one prompt
per forward pass when batch invariant).

`next_token_logprobs` (the optional capability of `base.TokenScorer`) gives the next-token log-probabilities of
a prompt set sharing one generated suffix, keeping the prompts' KV caches between calls (a small LRU of
sessions) so that each decoding step feeds only the new suffix tokens. When batch invariant, each prompt of a set
has its own KV cache and forward passes, so one prompt's distribution does not depend on another's.
"""

from __future__ import annotations

import copy
import gc
import inspect
from collections import OrderedDict
from collections.abc import Iterable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass

import numpy as np
import torch
from transformers import (
    AutoModelForCausalLM,
    AutoTokenizer,
    DynamicCache,
    LogitsProcessor,
    LogitsProcessorList,
    StoppingCriteria,
    StoppingCriteriaList,
)

from dpicl.inference.base import GenerationParams, check_variants, has_stop, postprocess, token_id_tuple
from dpicl.inference.dtypes import resolve_dtype
from dpicl.inference.kv_cache import growing_cache, with_cache
from dpicl.inference.models import resolve_llm
from dpicl.inference.openai_compat import label_first_tokens, row_seeds
from dpicl.inference.own_rows import OWN_ROWS, decode_group, row_groups, rows_may_mix
from dpicl.progress import silence_library_bars, track

_DTYPES = {"float32": torch.float32, "bfloat16": torch.bfloat16, "float16": torch.float16}

# Measured on the project's 2-core CPU machine (16 prompts x 32 new tokens, SmolLM2 fp32): idle, 2 threads
# 52-58 tok/s vs 1 thread 42-45; with the cores shared, 2 threads fell to 6-11 tok/s while 1 kept 24-45.
# One thread loses 20 % at best and wins 3-6x under load, so it is the default.
DEFAULT_CPU_THREADS = 1


@dataclass
class _TokenGroup:
    """Rows of a prompt set that share forward passes (one row each when batch invariant, else all of them): their
    KV cache, the left-padded attention mask it was built with, each row's next position, and the
    log-probabilities after the suffix fed so far."""

    cache: DynamicCache
    mask: torch.Tensor  # (n, length), long
    next_pos: torch.Tensor  # (n, 1), long: each row's number of real tokens
    logprobs: torch.Tensor  # (n, vocab_size), float32


@dataclass
class _TokenSession:
    """The state of one prompt set after `prompt + suffix`: its groups (in input order, rows consecutive), the
    suffix fed so far, and the log-probabilities of all rows after it."""

    groups: list[_TokenGroup]
    suffix: tuple[int, ...]
    logprobs: torch.Tensor  # (n, vocab_size), float32


class HFBackend:
    """A transformers causal LM loaded once (offline) and used for batched `generate` calls.

    `threads` sets torch's intra-op threads for the whole process (torch has no per-model setting); on CPU
    `None` means `DEFAULT_CPU_THREADS`, on CUDA it leaves torch's setting alone.

    `batch_invariant` (default True): every prompt in its own forward passes, so its output does not depend on
    the other prompts of a call (module docstring; privacy invariant 10). False batches `batch_size` prompts of
    similar length together (faster; outputs may then differ in their last bits, or in a greedy token, with
    the other prompts of the call: docs/PRIVACY.md). `batch_size` applies only then.

    `parallel_prompts` (default 1): how many greedy prompts that each run alone (or groups, or micro-batches)
    `generate` runs at once, each on its own thread. torch runs an op on the thread that calls it, so with one
    intra-op thread each the prompts use that many cores; every prompt still has its own forward passes, so its
    output is the same (tested). Worth it on idle cores only: under load, threads compete as `threads` does.

    `decode_rows` (default 1): greedy prompts that run alone are prefilled alone and then decoded up to this many at
    a time, the rows kept apart (`own_rows`): one read of the weights per step for the group instead of per prompt.
    A call has as many groups for each of the `parallel_prompts` threads where it has prompts enough
    (`own_rows.row_groups`). Greedy public prompts then decode in such groups too, in token order, with each
    beginning they share prefilled once (`prefix_tree`: the demo's public teachers show several queries the same
    public ticket).
    """

    name = "hf"
    # How many prompt sets `next_token_logprobs` keeps KV caches for (least recently used dropped first).
    token_cache_sessions = 4

    def __init__(
        self,
        model: str = "smollm2",
        device: str = "auto",
        dtype: str = "float32",
        threads: int | None = None,
        batch_size: int = 16,
        batch_invariant: bool = True,
        parallel_prompts: int = 1,
        decode_rows: int = 1,
    ) -> None:
        if not isinstance(batch_invariant, bool):
            raise TypeError("batch_invariant must be a bool")
        if batch_size < 1:
            raise ValueError(f"batch_size must be >= 1, got {batch_size}")
        if device == "auto":
            device = "cuda" if torch.cuda.is_available() else "cpu"
        self.device = torch.device(device)
        self.dtype = resolve_dtype(dtype, self.device.type)
        if threads is None and self.device.type == "cpu":
            threads = DEFAULT_CPU_THREADS
        if threads is not None:
            if threads < 1:
                raise ValueError(f"threads must be >= 1, got {threads}")
            torch.set_num_threads(threads)
        if parallel_prompts < 1:
            raise ValueError(f"parallel_prompts must be >= 1, got {parallel_prompts}")
        if decode_rows < 1:
            raise ValueError(f"decode_rows must be >= 1, got {decode_rows}")
        self.batch_size = batch_size
        self.batch_invariant = batch_invariant
        self.parallel_prompts = parallel_prompts
        self.decode_rows = decode_rows
        self.model_path = resolve_llm(model)

        silence_library_bars()
        self.tokenizer = AutoTokenizer.from_pretrained(self.model_path, local_files_only=True)
        self.tokenizer.padding_side = "left"
        if self.tokenizer.pad_token_id is None:
            self.tokenizer.pad_token = self.tokenizer.eos_token
        # decoding groups needs the attention that keeps rows apart; the default path keeps PyTorch's SDPA as is
        attention = {"attn_implementation": OWN_ROWS} if decode_rows > 1 else {}
        self.model = AutoModelForCausalLM.from_pretrained(
            self.model_path, dtype=_DTYPES[self.dtype], local_files_only=True, **attention
        ).to(self.device)
        self.model.eval()
        self._bos_id = self._missing_bos_id()
        output = self.model.get_output_embeddings()
        # The width of the logits (the lm head's rows); the embedding table bounds the ids we may feed.
        self.vocab_size = int(output.weight.shape[0]) if output is not None else int(
            self.model.config.get_text_config().vocab_size)
        self._input_vocab = int(self.model.get_input_embeddings().num_embeddings)
        self.eos_token_ids = self._find_eos_ids()
        self._token_sessions: OrderedDict[tuple[str, ...], _TokenSession] = OrderedDict()

    def _missing_bos_id(self) -> int | None:
        """The BOS id to prepend ourselves, or None.

        Gemma's tokenizer does not add `<bos>` and the model writes garbage without it (docs/STACK.md).
        SmolLM2's "bos" is the chat token `<|im_start|>` and was never prepended, so only prepend when the
        tokenizer config asks for it (`add_bos_token`, recorded from the GGUF at conversion) or the model is a
        Gemma.
        """
        bos = self.tokenizer.bos_token_id
        if bos is None:
            return None
        if self.tokenizer("a").input_ids[:1] == [bos]:
            return None  # the tokenizer adds it already
        wanted = self.tokenizer.init_kwargs.get("add_bos_token")
        if wanted is None:
            wanted = str(getattr(self.model.config, "model_type", "")).startswith("gemma")
        return bos if wanted else None

    def _find_eos_ids(self) -> frozenset[int]:
        """EOS of the tokenizer and of the model's generation config (an id or a list of ids), if any."""
        found: set[int] = set()
        for eos in (self.tokenizer.eos_token_id, getattr(self.model.generation_config, "eos_token_id", None)):
            if eos is None:
                continue
            found.update(int(e) for e in (eos if isinstance(eos, (list, tuple)) else [eos]))
        return frozenset(found)

    def _encode(self, texts: Sequence[str]) -> list[list[int]]:
        ids = self.tokenizer(list(texts)).input_ids
        if self._bos_id is not None:
            ids = [[self._bos_id, *row] for row in ids]
        return ids

    def count_tokens(self, texts: Sequence[str]) -> list[int]:
        """Prompt lengths in tokens, as `generate` would feed them (BOS included when we add it)."""
        return [len(row) for row in self._encode(texts)] if texts else []

    def _check_prompts(self, prompts: Sequence[str]) -> None:
        if isinstance(prompts, str):
            raise TypeError("prompts must be a sequence of strings, not a string")
        if self.model is None:
            raise RuntimeError("this backend has been closed")

    def _micro_batches(self, ids: list[list[int]], public: bool = False, workers: int = 1) -> list[list[int]]:
        """Indices of `ids` in micro-batches.

        Batch invariant (and not `public`, prompts without private records): one prompt each, in input order (a
        shape that depends on that prompt alone). Otherwise at most `batch_size`, longest prompts first: similar
        lengths share a micro-batch (little padding), and an out-of-memory error shows up at once. With `workers`
        threads, the number of micro-batches is a multiple of theirs (where there are prompts enough) and their
        sizes within one of each other, so no thread waits alone on a last one.
        """
        if self.batch_invariant and not public:
            return [[i] for i in range(len(ids))]
        order = sorted(range(len(ids)), key=lambda i: -len(ids[i]))
        return [order[group.start:group.stop] for group in row_groups(len(order), self.batch_size, workers)]

    def _pad(self, ids: list[list[int]]):
        """A left-padded batch (`input_ids`, `attention_mask`) on the model's device."""
        return self.tokenizer.pad({"input_ids": ids}, padding=True, return_tensors="pt").to(self.device)

    def label_token_ids(self, continuations: Sequence[str]) -> list[int]:
        """The first token id of each continuation, as it follows a prompt (`label_first_tokens`: distinct,
        non-empty; a multi-token label is scored by its first token, with a warning)."""
        return label_first_tokens(self.tokenizer, continuations)

    @torch.inference_mode()
    def label_logprobs(
        self, prompts: Sequence[str], continuations: Sequence[str], *, progress: bool = False, variants: int = 1
    ) -> np.ndarray:
        """Log-probabilities, shape (len(prompts), len(continuations)), of each continuation's first token as
        the next token after each prompt (log-softmax over the full vocabulary, computed in float32).

        One forward pass per micro-batch (per prompt when batch invariant: then a row's bits do not depend on
        the other prompts); with left padding the last position is the prediction position. Rows come back in
        input order.

        `variants` > 1: the prompts come in consecutive groups of that many variants of one prompt (the same
        demonstrations, different queries: `teachers.label_votes`' content-free inputs). When batch invariant, a
        group's common token prefix is prefilled once and its variants' remaining tokens run on it together
        (`_label_variants`): a group's rows depend on that group's prompts alone.
        """
        self._check_prompts(prompts)
        label_ids = self.label_token_ids(continuations)
        check_variants(len(prompts), variants)
        scores = np.empty((len(prompts), len(label_ids)), dtype=np.float64)
        if not prompts:
            return scores
        ids = self._encode(prompts)
        index = torch.tensor(label_ids, device=self.device)
        if variants > 1 and self.batch_invariant:
            groups = [list(range(i, i + variants)) for i in range(0, len(ids), variants)]
            for group in track(groups, "label logprobs", enabled=progress):
                scores[group] = self._label_variants([ids[i] for i in group], index)
            return scores
        extra = {"logits_to_keep": 1} if self._keeps_logits else {}
        for batch in track(self._micro_batches(ids), "label logprobs", enabled=progress):
            enc = self._pad([ids[i] for i in batch])
            mask = enc["attention_mask"]
            # Positions as `generate` computes them: counted from each row's first real token.
            positions = (mask.long().cumsum(-1) - 1).masked_fill(mask == 0, 0)
            logits = self.model(**enc, position_ids=positions, **extra).logits[:, -1, :]
            logprobs = torch.log_softmax(logits.float(), dim=-1).index_select(-1, index)
            scores[batch] = logprobs.cpu().numpy()
        return scores

    def _label_variants(self, rows: list[list[int]], index: torch.Tensor) -> np.ndarray:
        """The label log-probabilities after each of a group of token rows that share a prefix: the prefix in one
        forward pass, then each row's own remaining tokens alone on a copy of the prefix's KV cache (no padding:
        a calibrated vote's query part is several times longer than its content-free parts)."""
        for i, row in enumerate(rows):
            if not row:
                raise ValueError(f"prompt {i} of a group has no tokens: there is nothing to predict from")
        shared = 0  # each row keeps at least its last token to run on the prefix
        while shared < min(map(len, rows)) - 1 and len({row[shared] for row in rows}) == 1:
            shared += 1
        prefix = DynamicCache(config=self.model.config)
        if shared:
            self.model(input_ids=torch.tensor([rows[0][:shared]], device=self.device),
                       **with_cache(self.model, prefix), use_cache=True, **self._last_logits_only())
        out = np.empty((len(rows), len(index)), dtype=np.float64)
        for i, row in enumerate(rows):
            cache = prefix if i == len(rows) - 1 else copy.deepcopy(prefix)  # the last row may extend it
            logits = self.model(input_ids=torch.tensor([row[shared:]], device=self.device),
                                **with_cache(self.model, cache), use_cache=True,
                                **self._last_logits_only()).logits[:, -1, :]
            out[i] = torch.log_softmax(logits.float(), dim=-1).index_select(-1, index)[0].cpu().numpy()
        return out

    def encode_text(self, text: str) -> list[int]:
        """The token ids of a continuation `text` (no special tokens added), e.g. for a `suffix`."""
        if not isinstance(text, str):
            raise TypeError(f"text must be a string, got {type(text).__name__}")
        return list(self.tokenizer(text, add_special_tokens=False).input_ids) if text else []

    def decode(self, token_ids: Sequence[int]) -> str:
        """The text of `token_ids`, special tokens (EOS, ...) skipped."""
        ids = token_id_tuple(token_ids, self._input_vocab, "token_ids")
        return self.tokenizer.decode(list(ids), skip_special_tokens=True)

    @torch.inference_mode()
    def next_token_logprobs(
        self,
        prompts: Sequence[str],
        suffix: Sequence[int] = (),
        *,
        token_ids: Sequence[int] | None = None,
        cache: bool = True,
    ) -> np.ndarray:
        """Log-probabilities of the next token after `prompt + suffix` for each prompt: a float32 array of shape
        (len(prompts), vocab_size), rows in input order, the log-softmax over the full vocabulary computed in
        float32. With `token_ids`, only those columns (still normalized over the full vocabulary).

        `suffix` holds token ids shared by all prompts (the tokens generated so far). With `cache=True` the
        prompt set's KV cache is kept as a session (up to `token_cache_sessions` prompt sets, least recently
        used dropped first): a later call with the same prompts (an equal tuple) and a suffix extending the fed
        one runs one forward pass over only the new tokens; the same suffix again costs nothing. Any other call
        prefills `prompt + suffix` for all prompts in one forward pass (left-padded, positions counted from each
        row's first real token) and, with `cache=True`, replaces the prompt set's session. `cache=False` (for
        prompt sets used once) neither reads nor stores a session, so the cached ones stay.

        Batch invariant (the default): each prompt has its own KV cache and forward passes, so its row does not
        depend on the other prompts of the set. Otherwise the whole prompt set is one batch (callers keep sets
        small, up to about 100 sequences). A kept session holds its KV caches in memory until it is pushed out,
        `clear_token_cache()` or `close()`.
        """
        self._check_prompts(prompts)
        key = tuple(prompts)
        if not all(isinstance(p, str) for p in key):
            raise TypeError("prompts must be strings")
        fed = token_id_tuple(suffix, self._input_vocab, "suffix")
        columns = None if token_ids is None else token_id_tuple(token_ids, self.vocab_size, "token_ids")
        if not key:
            return np.empty((0, self.vocab_size if columns is None else len(columns)), dtype=np.float32)

        # Taken out while in use: a forward pass that fails leaves no half-updated session behind.
        session = self._token_sessions.pop(key, None) if cache else None
        if session is not None and fed[: len(session.suffix)] == session.suffix:
            if len(fed) > len(session.suffix):
                self._extend_session(session, fed[len(session.suffix) :])
        else:  # prompts not cached (or cache=False), or a suffix that does not extend the fed one
            session = self._prefill_session(key, fed, cache)
        if cache and self.token_cache_sessions > 0:
            self._token_sessions[key] = session
            while len(self._token_sessions) > self.token_cache_sessions:
                self._token_sessions.popitem(last=False)

        logprobs = session.logprobs
        if columns is not None:
            logprobs = logprobs.index_select(-1, torch.tensor(columns, dtype=torch.long, device=self.device))
        # A copy: the session keeps its own tensor, which the caller must not be able to change.
        return np.array(logprobs.cpu().numpy(), dtype=np.float32, copy=True)

    def _prefill_session(self, prompts: tuple[str, ...], suffix: tuple[int, ...], cache: bool) -> _TokenSession:
        """Forward passes over `prompt + suffix` (one per prompt when batch invariant, else one for all); the KV
        caches only when `cache`."""
        rows = [[*row, *suffix] for row in self._encode(prompts)]
        for i, row in enumerate(rows):
            if not row:
                raise ValueError(f"prompt {i} has no tokens and the suffix is empty: there is nothing to predict "
                                 "the next token from")
        groups = [[i] for i in range(len(rows))] if self.batch_invariant else [list(range(len(rows)))]
        parts = [self._prefill_group([rows[i] for i in group], cache) for group in groups]
        return _TokenSession(groups=parts, suffix=suffix, logprobs=self._joined(parts))

    def _prefill_group(self, rows: list[list[int]], cache: bool) -> _TokenGroup:
        enc = self._pad(rows)
        mask = enc["attention_mask"].long()
        # Positions as `generate` computes them: counted from each row's first real token.
        positions = (mask.cumsum(-1) - 1).masked_fill(mask == 0, 0)
        past = DynamicCache(config=self.model.config) if cache else None
        out = self.model(input_ids=enc["input_ids"], attention_mask=mask, position_ids=positions,
                         **with_cache(self.model, past), use_cache=cache, **self._last_logits_only())
        return _TokenGroup(
            cache=past,  # type: ignore[arg-type]
            mask=mask,
            next_pos=mask.sum(-1, keepdim=True),
            logprobs=torch.log_softmax(out.logits[:, -1, :].float(), dim=-1),
        )

    def _extend_session(self, session: _TokenSession, new: tuple[int, ...]) -> None:
        """Feed the `new` suffix tokens (the same for every row) on top of the session's KV caches."""
        for group in session.groups:
            self._extend_group(group, new)
        session.suffix = session.suffix + new
        session.logprobs = self._joined(session.groups)

    def _extend_group(self, group: _TokenGroup, new: tuple[int, ...]) -> None:
        n, k = group.mask.shape[0], len(new)
        input_ids = torch.tensor([list(new)] * n, dtype=torch.long, device=self.device)
        # Each row continues its own positions (rows are left-padded to different lengths).
        positions = group.next_pos + torch.arange(k, device=self.device)
        mask = torch.cat([group.mask, group.mask.new_ones((n, k))], dim=-1)
        out = self.model(input_ids=input_ids, attention_mask=mask, position_ids=positions,
                         **with_cache(self.model, group.cache), use_cache=True, **self._last_logits_only())
        group.mask = mask
        group.next_pos = group.next_pos + k
        group.logprobs = torch.log_softmax(out.logits[:, -1, :].float(), dim=-1)

    @staticmethod
    def _joined(groups: list[_TokenGroup]) -> torch.Tensor:
        """All rows' log-probabilities in input order (groups hold consecutive rows, in order)."""
        return groups[0].logprobs if len(groups) == 1 else torch.cat([g.logprobs for g in groups])

    def clear_token_cache(self) -> None:
        """Drop the KV caches `next_token_logprobs` keeps (their memory is freed)."""
        self._token_sessions.clear()
        if self.device.type == "cuda":
            torch.cuda.empty_cache()

    def _last_logits_only(self) -> dict:
        return {"logits_to_keep": 1} if self._keeps_logits else {}

    @property
    def _keeps_logits(self) -> bool:
        """Whether the model's forward takes `logits_to_keep` (then only the last position's logits are made)."""
        return "logits_to_keep" in inspect.signature(self.model.forward).parameters

    @torch.inference_mode()
    def generate(
        self, prompts: Sequence[str], params: GenerationParams, *, progress: bool = False
    ) -> list[str]:
        self._check_prompts(prompts)
        if not prompts:
            return []
        ids = self._encode(prompts)
        # Greedy private prompts (each alone in its forward passes) may decode in groups that keep rows apart;
        # greedy public prompts decode in groups too, each beginning they share prefilled once (`prefix_tree`).
        shared = params.public_prompts
        grouped = self.decode_rows > 1 and params.greedy and (self.batch_invariant or shared)
        if grouped:
            # private: consecutive prompts in input order (the call's length and the settings set the groups);
            # public: in token order, so that prompts sharing beginnings share a group
            order = sorted(range(len(ids)), key=ids.__getitem__) if shared else range(len(ids))
            batches = [[order[i] for i in group]
                       for group in row_groups(len(ids), self.decode_rows, self.parallel_prompts)]
        else:
            batches = self._micro_batches(ids, params.public_prompts, self.parallel_prompts if params.greedy else 1)
        outputs: list[str | None] = [None] * len(ids)
        # A seeded call runs in a forked RNG so the caller's global torch RNG is untouched; an unseeded one
        # must not fork, or every call would restore, and so repeat, the same random stream.
        seeded = params.seed is not None
        # Batch invariant: each prompt samples from its own stream (the call's seed and its position), not from
        # where the prompts before it, whose lengths are private, left a shared one.
        seeds = row_seeds(params.seed, len(ids)) if seeded and self.batch_invariant and not params.greedy else None
        cuda = [self.device] if self.device.type == "cuda" else []
        # no row of a public or opted-out batch needs to be kept apart from the others
        mixing = params.public_prompts or not self.batch_invariant

        def one(batch: list[int]) -> list[tuple[str, bool]]:
            if seeds is not None:
                torch.manual_seed(seeds[batch[0]])
            rows = [ids[i] for i in batch]
            # inference mode is per thread: a worker thread would otherwise record autograd history through
            # every decoding step of a group (gigabytes for the demo's non-private baseline); so is rows_may_mix
            with torch.inference_mode(), rows_may_mix(mixing):
                return self._decode_group(rows, params, shared) if grouped else self._generate_batch(rows, params)

        # Only greedy calls go in parallel: sampling draws from torch's one global generator.
        workers = min(self.parallel_prompts, len(batches)) if params.greedy else 1
        with torch.random.fork_rng(devices=cuda, enabled=seeded), \
                ThreadPoolExecutor(workers, thread_name_prefix="dpicl-hf") as pool:
            if seeded:
                torch.manual_seed(params.seed)
            done = pool.map(one, batches) if workers > 1 else map(one, batches)
            for batch, texts in zip(batches, track(done, "generate", total=len(batches), enabled=progress)):
                for i, (text, truncated) in zip(batch, texts, strict=True):
                    outputs[i] = postprocess(text, params.stop, truncated=truncated)
        return outputs  # type: ignore[return-value]

    def _generate_batch(self, ids: list[list[int]], params: GenerationParams) -> list[tuple[str, bool]]:
        """Each prompt's completion, and whether the token limit cut it (no EOS: rows that end early are padded
        with EOS or the pad token)."""
        enc = self._pad(ids)
        prompt_len = enc["input_ids"].shape[1]
        kwargs: dict = dict(
            max_new_tokens=params.max_new_tokens,
            pad_token_id=self.tokenizer.pad_token_id,
        )
        if params.greedy:
            kwargs.update(do_sample=False, temperature=None, top_p=None, top_k=None)
        else:
            # top_k=0: no top-k cut (transformers' default is 50); only temperature and top_p apply.
            kwargs.update(do_sample=True, temperature=params.temperature, top_p=params.top_p, top_k=0)
        if params.stop:
            stopper = _StopStrings(self.tokenizer, params.stop, prompt_len)
            kwargs["stopping_criteria"] = StoppingCriteriaList([stopper])
        if not params.empty_answers and self.eos_token_ids:
            kwargs["logits_processor"] = LogitsProcessorList([_NoEmptyAnswer(self._blank_answer, self.eos_token_ids,
                                                                              prompt_len)])
        if params.public_prompts and prompt_len > 1 and len({tuple(row) for row in ids}) < len(ids):
            kwargs.update(with_cache(self.model, self._shared_prefill(ids, enc)))
        else:
            kwargs.update(with_cache(self.model, growing_cache(self.model.config)))
        new = self.model.generate(**enc, **kwargs)[:, prompt_len:]
        ended = set(self.eos_token_ids) | {self.tokenizer.pad_token_id}
        at_limit = new.shape[1] >= params.max_new_tokens
        truncated = [at_limit and not ended.intersection(row.tolist()) for row in new]
        return list(zip(self.tokenizer.batch_decode(new, skip_special_tokens=True), truncated, strict=True))

    def _shared_prefill(self, ids: list[list[int]], enc) -> DynamicCache:
        """The KV cache of every row of a public batch but its last token, each distinct prompt prefilled once
        (ESA's candidates: one zero-shot prompt sampled many times): `generate` then starts at the last token."""
        distinct = list(dict.fromkeys(tuple(row) for row in ids))
        first = [next(i for i, row in enumerate(ids) if tuple(row) == prompt) for prompt in distinct]
        where = torch.tensor([distinct.index(tuple(row)) for row in ids], device=self.device)
        mask = enc["attention_mask"][first, :-1]
        positions = (mask.long().cumsum(-1) - 1).masked_fill(mask == 0, 0)
        cache = growing_cache(self.model.config)
        self.model(input_ids=enc["input_ids"][first, :-1], attention_mask=mask, position_ids=positions,
                   **with_cache(self.model, cache), use_cache=True)
        cache.batch_select_indices(where)  # row i: a copy of its prompt's cache
        return cache

    def _decode_group(self, ids: list[list[int]], params: GenerationParams,
                      shared_prefixes: bool = False) -> list[tuple[str, bool]]:
        """Greedy completions of a group decoded together, rows kept apart (`own_rows`; public rows prefilled
        sharing their beginnings: `prefix_tree`), ended as `_generate_batch` ends them: at EOS, at a stop string
        after leading whitespace, or at the token limit."""
        ended = set(self.eos_token_ids) | {self.tokenizer.pad_token_id}

        def done(tokens: list[int]) -> bool:
            if tokens[-1] in self.eos_token_ids:
                return True
            return bool(params.stop) and has_stop(self.tokenizer.decode(tokens, skip_special_tokens=True),
                                                  params.stop)

        eos = tuple(self.eos_token_ids)

        def banned(tokens: list[int]) -> tuple[int, ...]:
            return eos if not params.empty_answers and self._blank_answer(tokens) else ()

        rows = decode_group(self.model, ids, params.max_new_tokens, done, shared_prefixes, banned)
        return [(self.tokenizer.decode(tokens, skip_special_tokens=True),
                 len(tokens) >= params.max_new_tokens and not ended.intersection(tokens)) for tokens in rows]

    def _blank_answer(self, tokens) -> bool:
        """Whether generated `tokens` (a list or a 1-d tensor) show nothing yet: no text but whitespace."""
        return not self.tokenizer.decode(tokens, skip_special_tokens=True).strip()

    def close(self) -> None:
        """Free the model's memory (and the kept KV caches); the backend cannot generate or score afterwards."""
        self._token_sessions.clear()
        self.model = None
        gc.collect()
        if self.device.type == "cuda":
            torch.cuda.empty_cache()


class _NoEmptyAnswer(LogitsProcessor):
    """Masks the end-of-sequence tokens of every row whose answer shows nothing yet (`GenerationParams.empty_answers`
    false), from that row's own tokens alone."""

    def __init__(self, blank, eos: Iterable[int], prompt_len: int) -> None:
        self.blank = blank
        self.eos = sorted(eos)
        self.prompt_len = prompt_len

    def __call__(self, input_ids: torch.LongTensor, scores: torch.FloatTensor) -> torch.FloatTensor:
        rows = [row for row in range(input_ids.shape[0]) if self.blank(input_ids[row, self.prompt_len:])]
        if not rows:
            return scores
        scores = scores.clone()
        scores[torch.tensor(rows, device=scores.device)[:, None], torch.tensor(self.eos, device=scores.device)] = \
            float("-inf")
        return scores


class _StopStrings(StoppingCriteria):
    """Marks a sequence done once its generated text, after leading whitespace, contains a stop string.

    transformers' built-in `stop_strings` would stop at a leading newline; generation ends when all are done.
    """

    def __init__(self, tokenizer, stop: Sequence[str], prompt_len: int) -> None:
        self.tokenizer = tokenizer
        self.stop = tuple(stop)
        self.prompt_len = prompt_len
        self.done: torch.Tensor | None = None

    def __call__(self, input_ids: torch.LongTensor, scores, **kwargs) -> torch.BoolTensor:
        if self.done is None:
            self.done = torch.zeros(input_ids.shape[0], dtype=torch.bool, device=input_ids.device)
        for row in (~self.done).nonzero().flatten().tolist():
            text = self.tokenizer.decode(input_ids[row, self.prompt_len :], skip_special_tokens=True)
            if has_stop(text, self.stop):
                self.done[row] = True
        return self.done.clone()
