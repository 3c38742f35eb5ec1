"""What the keyword methods share (ksa-jem, ksa-ptr, ksa-public): the reconstruction prompt with the DP keywords as
hints, answered greedily by the LLM from public text only."""

from __future__ import annotations

from pydantic import field_validator

from dpicl.inference.teachers import greedy_params
from dpicl.methods.base import EnsembleMethod, EnsembleSettings
from dpicl.prompts import keyword_demonstrations, keyword_prompt


class KeywordSettings(EnsembleSettings):
    """KSA (paper 001 §3.2.2): teachers' outputs → private keywords → the LLM answers with them as hints."""

    # no default here: each KSA method declares its own (None: `prompts.keyword_prompt` builds the prompt)
    keyword_template: str | None
    """The query prompt with keyword hints ({input}: the query, {keywords}: the released keywords, ", "-joined);
    None: the task's own query prompt with a "Keywords:" line before its answer cue."""

    @field_validator("keyword_template")
    @classmethod
    def _keyword_fields(cls, v: str | None) -> str | None:
        if v is not None and ("{input}" not in v or "{keywords}" not in v):
            raise ValueError("keyword_template must contain {input} and {keywords}")
        return v


class KeywordMethod(EnsembleMethod):
    """Releases the LLM's answer to the public query with the DP keywords as hints (post-processing); a None
    keyword set (KSA-PTR's failed test) releases the zero-shot answer."""

    release_needs = ("zero_shot",)
    release_only = frozenset({"keyword_template"})

    def release(self, cfg, aggregates, public, queries, backend):
        prompts = [
            public[q]["zero_shot"] if result["keywords"] is None
            else keyword_prompt(cfg.task, cfg.method.keyword_template, queries[q], result["keywords"],
                                example=self._example(cfg, public[q]))
            for q, result in aggregates.items()
        ]
        answers = backend.generate(prompts, greedy_params(cfg), progress=True) if prompts else []
        for (query_id, result), answer in zip(aggregates.items(), answers, strict=True):
            yield query_id, answer, {"keywords": result["keywords"]}

    @staticmethod
    def _example(cfg, public: dict) -> str:
        """What the keyword prompt shows first (public): the few-shot prompt's public demonstrations where the
        method has them (`public_fewshot`): with their own keywords under the default prompt, as the task shows
        demonstrations under a configured `keyword_template` (its `{example}`); else the public one-shot example,
        else nothing."""
        demos = public.get("public_demos")
        if demos is None:
            return public.get("public_example", "")
        if cfg.method.keyword_template is None:
            return keyword_demonstrations(cfg.task, demos, cfg.method.k)
        return cfg.task.separator.join(cfg.task.demo_template.format(input=inp, output=out) for inp, out in demos)
