"""Prompt construction (pipeline stage 2): instruction + demonstrations + query, plain completion format.

Pure string functions; the callers keep prompts in DuckDB, never in logs or Prefect results.
"""

from __future__ import annotations

import hashlib
import random
from collections.abc import Sequence

from dpicl.config import TaskConfig
from dpicl.keywords import keywords


def render_prompt(task: TaskConfig, demonstrations: Sequence[tuple[str, str]], query: str) -> str:
    """One prompt: optional instruction, each demonstration, then the query left open for the model."""
    parts = [task.instruction] if task.instruction else []
    parts += [task.demo_template.format(input=inp, output=out) for inp, out in demonstrations]
    parts.append(task.query_template.format(input=query))
    return task.separator.join(parts)


def zero_shot_prompt(task: TaskConfig, query: str) -> str:
    """The public prompt: no private data, so its outputs are public candidates."""
    return render_prompt(task, (), query)


def keyword_prompt(task: TaskConfig, keyword_template: str | None, query: str, keywords: Sequence[str],
                   example: str = "") -> str:
    """KSA's reconstruction prompt (paper 001 App D.2.2): the zero-shot prompt with the DP keywords as hints;
    with public data (paper 004 App H.3) also a public one-shot ``example``. Without a ``keyword_template``, the
    task's own query prompt with a "Keywords:" line before its answer cue (its last line): papers 001/004's
    "Output with the following word suggestions …" templates derail small models (docs/BENCHMARKS.md)."""
    parts = [task.instruction] if task.instruction else []
    if keyword_template is None:
        keyword_template = task_keyword_template(task, with_example=bool(example))
    parts.append(keyword_template.format(input=query, keywords=", ".join(keywords), example=example))
    return task.separator.join(parts)


def task_keyword_template(task: TaskConfig, with_example: bool = False) -> str:
    """The task's query template with "Keywords: {keywords}" on a line before its last line (the answer cue, e.g.
    "Summary:"); first, for a one-line template; after a public one-shot ``{example}`` when asked."""
    body = _with_keywords_line(task.query_template)
    return f"{{example}}{task.separator}{body}" if with_example else body


def _with_keywords_line(template: str) -> str:
    """``template`` with a "Keywords: {keywords}" line before its last line; first, for a one-line template."""
    head, newline, last = template.rpartition("\n")
    return f"{head}\nKeywords: {{keywords}}\n{last}" if newline else f"Keywords: {{keywords}}\n{last}"


def keyword_demonstrations(task: TaskConfig, demonstrations: Sequence[tuple[str, str]], k: int) -> str:
    """Public demonstrations shown with keyword hints: each with a "Keywords:" line (before its answer cue, as in
    the default keyword prompt) naming the first ``k`` keywords of its own output: they show the model how an
    answer uses its hints (measured against unannotated ones: docs/BENCHMARKS.md, "KSA-public after public
    few-shot examples")."""
    template = _with_keywords_line(task.demo_template)
    return task.separator.join(template.format(input=inp, output=out, keywords=", ".join(keywords(out)[:k]))
                               for inp, out in demonstrations)


def selection_prompt(task: TaskConfig, selection_template: str, query: str, candidates: Sequence[str],
                     example: str) -> str:
    """SGA's final prompt (paper 004 App H.1): the LLM picks among public candidates, with a public one-shot
    example. Candidates are joined with ",\n" as in the paper's code."""
    parts = [task.instruction] if task.instruction else []
    parts.append(selection_template.format(input=query, candidates=",\n".join(candidates), example=example))
    return task.separator.join(parts)


def public_teacher_groups(n_records: int, teachers: int, shots: int, key: str) -> list[list[int]]:
    """Which public records each public teacher shows (indices; paper 004's public ensemble): teachers × shots
    distinct records (fewer if the public set is smaller), drawn without replacement by a generator seeded with
    ``key``. Public data, so the draw may be deterministic: the same query gets the same public prompts in
    every run, and their outputs are reused from the cache."""
    seed = int.from_bytes(hashlib.sha256(key.encode("utf-8")).digest()[:8], "big")
    chosen = random.Random(seed).sample(range(n_records), min(n_records, teachers * shots))
    return [chosen[t * shots:(t + 1) * shots] for t in range(teachers)]


def nearest_teacher_groups(ranked: Sequence[int], teachers: int, shots: int) -> list[list[int]]:
    """Which public records each public teacher shows when they are the query's most similar ones (``ranked``:
    record indices, most similar first): teacher t shows the records ranked t, t + teachers, t + 2·teachers, …,
    the most similar of them last, next to the query; so every teacher has one of the `teachers` nearest."""
    chosen = list(ranked[:teachers * shots])
    return [chosen[t::teachers][::-1] for t in range(teachers)]


def public_ensemble(task: TaskConfig, demonstrations: Sequence[tuple[str, str]], query: str, teachers: int,
                    shots: int, key: str, ranked: Sequence[int] | None = None,
                    fewshot: int | None = None) -> tuple[list[str], str]:
    """The public teachers' prompts for ``query`` and the public one-shot example: the last demonstration of the
    first public teacher, as paper 004's code takes it. The demonstrations are drawn from the public (input,
    output) pairs by :func:`public_teacher_groups`, or, given the public records ``ranked`` by similarity to the
    query, by :func:`nearest_teacher_groups` (then the example is the nearest public record). With ``fewshot``
    (nearest only), one more prompt follows the teachers': the ``fewshot`` nearest records, the nearest last."""
    drawn = (public_teacher_groups(len(demonstrations), teachers, shots, key) if ranked is None
             else nearest_teacher_groups(ranked, teachers, shots))
    if fewshot:
        if ranked is None:
            raise ValueError("the public few-shot prompt shows the query's most similar public records: pass ranked")
        drawn.append(fewshot_records(ranked, fewshot))
    groups = [[demonstrations[i] for i in g] for g in drawn]
    example_input, example_output = groups[0][-1]
    return ([render_prompt(task, g, query) for g in groups],
            task.demo_template.format(input=example_input, output=example_output))


def fewshot_records(ranked: Sequence[int], fewshot: int) -> list[int]:
    """The public few-shot prompt's records (`public_fewshot`): the ``fewshot`` most similar, the nearest last."""
    return list(ranked[:fewshot])[::-1]


def icl_groups(n_records: int, shots: int, key: str, ranked: Sequence[int] | None = None,
               consensus: int | None = None) -> list[list[int]]:
    """The demonstrations (record indices) of each prompt of one free ICL answer (`synthetic-icl`): `consensus`
    one-shot prompts if set, then the `shots`-shot prompt. Drawn by :func:`public_teacher_groups` with ``key``, or,
    given the records ``ranked`` by similarity to the query, the nearest: one-shot prompt t shows the record ranked
    t, the few-shot prompt the `shots` nearest, the nearest last."""
    if ranked is None:
        (fewshot,) = public_teacher_groups(n_records, 1, shots, key)
        single = public_teacher_groups(n_records, consensus, 1, f"{key}\0consensus") if consensus else []
    else:
        fewshot = fewshot_records(ranked, shots)
        single = nearest_teacher_groups(ranked, consensus, 1) if consensus else []
    return [*single, fewshot]


def public_key(public_dataset: str, query: str) -> str:
    """What the public ensemble's draw for a query depends on (the same in every run: its outputs are cached)."""
    return f"{public_dataset}\0{hashlib.sha256(query.encode()).hexdigest()}"
