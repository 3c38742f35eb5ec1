"""How teachers answer, shared by the pipeline's stages, the methods' releases and the evaluation: greedy generation
with the run's settings, and a label vote per prompt for classification."""

from __future__ import annotations

import numpy as np

from dpicl.inference.base import GenerationParams, require


def greedy_params(cfg) -> GenerationParams:
    """The run's generation settings (greedy unless the config says otherwise)."""
    gen = cfg.generation
    return GenerationParams(max_new_tokens=gen.max_new_tokens, temperature=gen.temperature, top_p=gen.top_p,
                            stop=tuple(gen.stop))


def label_votes(backend, prompts: list[str], cfg) -> list[int]:
    """Each prompt's most likely label (index into task.labels) by the next-token log-probabilities."""
    require(backend, "label_logprobs")
    if not prompts:
        return []
    scores = backend.label_logprobs(prompts, [cfg.task.label_prefix + label for label in cfg.task.labels],
                                    progress=True)
    return np.argmax(np.asarray(scores), axis=1).astype(int).tolist()
