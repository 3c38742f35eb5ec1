"""Task metrics of paper 001 (MECHANISMS §9): ROUGE-1/2/L F1 for summaries, accuracy for labels.

ROUGE is Google's `rouge_score` with its defaults (no stemming), the backend of `evaluate.load("rouge")` that
the paper's notebook used; paper 004 scores with the Porter stemmer (``stemmer=True``). Scores are mean F1 × 100.
"""

from __future__ import annotations

import functools
from collections.abc import Sequence

ROUGE_TYPES = ("rouge1", "rouge2", "rougeL")


@functools.lru_cache(maxsize=2)
def _scorer(stemmer: bool = False):
    from rouge_score import rouge_scorer

    return rouge_scorer.RougeScorer(list(ROUGE_TYPES), use_stemmer=stemmer)


def _check_pairs(predictions: Sequence[str], references: Sequence[str]) -> None:
    if len(predictions) != len(references):
        raise ValueError(f"{len(predictions)} predictions for {len(references)} references")
    if not predictions:
        raise ValueError("no predictions to score")


def rouge(predictions: Sequence[str], references: Sequence[str], *, stemmer: bool = False) -> dict[str, float]:
    """Mean ROUGE-1/2/L F-measure × 100 of each prediction against its reference."""
    _check_pairs(predictions, references)
    scorer = _scorer(stemmer)
    totals = dict.fromkeys(ROUGE_TYPES, 0.0)
    for prediction, reference in zip(predictions, references):
        for name, score in scorer.score(reference, prediction).items():
            totals[name] += score.fmeasure
    return {name: 100.0 * total / len(predictions) for name, total in totals.items()}


def accuracy(predictions: Sequence[str], references: Sequence[str]) -> float:
    """Percentage of predictions equal to their reference label."""
    _check_pairs(predictions, references)
    return 100.0 * sum(p == r for p, r in zip(predictions, references)) / len(predictions)
