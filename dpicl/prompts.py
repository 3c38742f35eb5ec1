"""Prompt construction (pipeline stage 2): instruction + demonstrations + query, plain completion format.

Pure string functions; the callers keep prompts in DuckDB, never in logs or Prefect results.
"""

from __future__ import annotations

from collections.abc import Sequence

from dpicl.config import TaskConfig


def render_prompt(task: TaskConfig, demonstrations: Sequence[tuple[str, str]], query: str) -> str:
    """One prompt: optional instruction, each demonstration, then the query left open for the model."""
    parts = [task.instruction] if task.instruction else []
    parts += [task.demo_template.format(input=inp, output=out) for inp, out in demonstrations]
    parts.append(task.query_template.format(input=query))
    return task.separator.join(parts)


def zero_shot_prompt(task: TaskConfig, query: str) -> str:
    """The public prompt: no private data, so its outputs are public candidates."""
    return render_prompt(task, (), query)


def keyword_prompt(task: TaskConfig, keyword_template: str, query: str, keywords: Sequence[str]) -> str:
    """KSA's reconstruction prompt (paper 001 App D.2.2): the zero-shot prompt with the DP keywords as hints."""
    parts = [task.instruction] if task.instruction else []
    parts.append(keyword_template.format(input=query, keywords=", ".join(keywords)))
    return task.separator.join(parts)
