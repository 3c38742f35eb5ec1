"""Task metrics computed as each paper computes them (MECHANISMS §9).

Names of the metrics, the paper that reports each, and how it is computed:

* ``rouge1``, ``rouge2``, ``rougeL`` (001): Google's ``rouge_score`` F1 without stemming, the backend and
  defaults of ``evaluate.load("rouge")``.
* ``rouge1_stem``, ``rouge2_stem``, ``rougeL_stem`` (004): ``RougeScorer(..., use_stemmer=True)`` F1 (Porter).
* ``sacrebleu`` (001 DocVQA; corpus only): corpus BLEU of ``sacrebleu`` with its defaults (tokenizer 13a, exp
  smoothing), as ``evaluate.load("sacrebleu")``.
* ``sentence_sacrebleu`` (no paper): the same BLEU per query (``sacrebleu.sentence_bleu``), for spreads only.
* ``bleu1`` (004 QA): NLTK ``sentence_bleu`` with weights (1,0,0,0) and ``SmoothingFunction().method4``.
* ``meteor`` (004 QA): ``nltk.translate.meteor_score.meteor_score``; needs NLTK's WordNet corpus.
* ``levenshtein`` (001 DocVQA): 1 − lev(a, b) / max(len a, len b) on the characters as they are (``rapidfuzz``);
  two empty strings score 100.
* ``accuracy`` (001, 002): exact string match.

Every score is on the 0–100 scale the papers report. ``score`` gives per-query lists of the per-query metrics;
the corpus-level ``sacrebleu`` is one number per corpus, so it has no per-query list: ``corpus_sacrebleu``
computes it and ``evaluate`` reports it beside the per-query means.

References: each prediction has one reference string or a sequence of them (E2E has several). With several,
ROUGE, Levenshtein and accuracy take the best reference; BLEU (NLTK and sacreBLEU) and METEOR use them all as
their libraries do (clipped counts over all references, closest reference length; METEOR's best reference);
corpus sacreBLEU allows a different number of references per prediction.

Word tokens (``bleu1``, ``meteor``): 004 uses ``nltk.word_tokenize``, whose sentence splitter needs NLTK's punkt
data; we use ``dpicl.keywords.words`` (the same NLTK word tokenizer on sentences split by a regular expression),
which needs no data and can differ from punkt only where a sentence-final-looking period (e.g. "Dr. Smith") is
split off.

METEOR needs WordNet. No well-kept PyPI package ships it, and this project never calls ``nltk.download`` at run
time, so without it ``meteor`` raises ``MetricUnavailable`` (``evaluate`` lists it under ``skipped``).

Errors name counts, indices and metric names only, never the text of a prediction or reference (it may be
private).
"""

from __future__ import annotations

import functools
import math
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field

ROUGE_TYPES = ("rouge1", "rouge2", "rougeL")

Reference = str | Sequence[str]

WORDNET_FIX = (
    "NLTK's WordNet corpus was not found on NLTK's data path and is never downloaded at run time; "
    "to score METEOR, run `python -m nltk.downloader -d DIR wordnet` on a machine with network access, "
    "bring DIR here and set NLTK_DATA=DIR before starting Python"
)


class MetricUnavailable(RuntimeError):
    """A metric that cannot be computed on this machine; ``reason`` says why and how to fix it."""

    def __init__(self, metric: str, reason: str):
        super().__init__(f"{metric} unavailable: {reason}")
        self.metric = metric
        self.reason = reason


# ---------------------------------------------------------------------------------------------- input checks


def _check_pairs(predictions: Sequence[str], references: Sequence[Reference]) -> None:
    if len(predictions) != len(references):
        raise ValueError(f"{len(predictions)} predictions for {len(references)} references")
    if not predictions:
        raise ValueError("no predictions to score")
    for i, p in enumerate(predictions):
        if not isinstance(p, str):
            raise TypeError(f"prediction {i} is a {type(p).__name__}, not a str")


def _reference_lists(predictions: Sequence[str], references: Sequence[Reference]) -> list[list[str]]:
    """Checked pairs, with each reference as a non-empty list of strings."""
    _check_pairs(predictions, references)
    out = []
    for i, r in enumerate(references):
        refs = [r] if isinstance(r, str) else list(r)
        if not refs:
            raise ValueError(f"query {i} has no reference")
        if not all(isinstance(x, str) for x in refs):
            raise TypeError(f"reference {i} must be a str or a sequence of str")
        out.append(refs)
    return out


# ---------------------------------------------------------------------------------------------- ROUGE


@functools.lru_cache(maxsize=16)
def _scorer(stemmer: bool = False, types: tuple[str, ...] = ROUGE_TYPES):
    from rouge_score import rouge_scorer, tokenizers

    # the default tokenizer, given explicitly: without one the scorer logs through absl, whose first log call
    # installs a handler on the root logger, and every Prefect log line after it was printed a second time
    return rouge_scorer.RougeScorer(list(types), tokenizer=tokenizers.DefaultTokenizer(use_stemmer=stemmer))


def rouge_per_query(
    predictions: Sequence[str],
    references: Sequence[Reference],
    *,
    stemmer: bool = False,
    types: Sequence[str] = ROUGE_TYPES,
) -> dict[str, list[float]]:
    """ROUGE F1 × 100 of each prediction, per type; with several references the best one per type
    (``RougeScorer.score_multi``, as ``evaluate.load("rouge")`` does). 001: no stemmer; 004: ``stemmer=True``."""
    refs = _reference_lists(predictions, references)
    scorer = _scorer(stemmer, tuple(types))
    out: dict[str, list[float]] = {t: [] for t in types}
    for prediction, rs in zip(predictions, refs):
        scores = scorer.score(rs[0], prediction) if len(rs) == 1 else scorer.score_multi(rs, prediction)
        for t in types:
            out[t].append(100.0 * scores[t].fmeasure)
    return out


def rouge(predictions: Sequence[str], references: Sequence[Reference], *, stemmer: bool = False) -> dict[str, float]:
    """Mean ROUGE-1/2/L F-measure × 100 of each prediction against its reference (001; 004 with ``stemmer``)."""
    return {t: math.fsum(v) / len(v) for t, v in rouge_per_query(predictions, references, stemmer=stemmer).items()}


# ---------------------------------------------------------------------------------------------- BLEU


def _ref_streams(refs: list[list[str]]) -> list[list[str | None]]:
    """sacreBLEU's reference streams: stream k holds each query's k-th reference, None where it has fewer."""
    width = max(len(r) for r in refs)
    return [[r[k] if k < len(r) else None for r in refs] for k in range(width)]


def corpus_sacrebleu(predictions: Sequence[str], references: Sequence[Reference]) -> float:
    """Corpus BLEU (0–100) of ``sacrebleu`` with its defaults (13a, exp smoothing), as 001's
    ``evaluate.load("sacrebleu")``; one number for the whole corpus."""
    import sacrebleu

    refs = _reference_lists(predictions, references)
    return float(sacrebleu.corpus_bleu(list(predictions), _ref_streams(refs)).score)


def sentence_sacrebleu(predictions: Sequence[str], references: Sequence[Reference]) -> list[float]:
    """``sacrebleu.sentence_bleu`` (0–100) of each prediction: a per-query spread, not a paper's number."""
    import sacrebleu

    refs = _reference_lists(predictions, references)
    return [float(sacrebleu.sentence_bleu(p, rs).score) for p, rs in zip(predictions, refs)]


def _tokens(text: str) -> list[str]:
    from dpicl.keywords import words

    return words(text)


def bleu1(predictions: Sequence[str], references: Sequence[Reference]) -> list[float]:
    """004's BLEU: NLTK sentence BLEU-1 × 100 (weights (1,0,0,0), ``SmoothingFunction().method4``) on word tokens."""
    from nltk.translate.bleu_score import SmoothingFunction, sentence_bleu

    refs = _reference_lists(predictions, references)
    smooth = SmoothingFunction().method4
    return [100.0 * sentence_bleu([_tokens(r) for r in rs], _tokens(p), weights=(1, 0, 0, 0), smoothing_function=smooth)
            for p, rs in zip(predictions, refs)]


# ---------------------------------------------------------------------------------------------- METEOR


def _wordnet():
    """NLTK's WordNet reader, loaded from NLTK's data path; ``MetricUnavailable`` when it is not there."""
    from nltk.corpus import wordnet

    try:
        wordnet.ensure_loaded()
    except LookupError:
        raise MetricUnavailable("meteor", WORDNET_FIX) from None
    return wordnet


def meteor(predictions: Sequence[str], references: Sequence[Reference]) -> list[float]:
    """004's METEOR × 100: ``meteor_score([ref_tokens, ...], pred_tokens)`` with NLTK's defaults
    (lower-casing, Porter stems, WordNet synonyms); raises ``MetricUnavailable`` without WordNet."""
    from nltk.translate.meteor_score import meteor_score

    refs = _reference_lists(predictions, references)
    wordnet = _wordnet()
    return [100.0 * meteor_score([_tokens(r) for r in rs], _tokens(p), wordnet=wordnet)
            for p, rs in zip(predictions, refs)]


# ---------------------------------------------------------------------------------------------- others


def levenshtein(predictions: Sequence[str], references: Sequence[Reference]) -> list[float]:
    """001's normalised Levenshtein similarity × 100: 1 − lev(a, b) / max(len a, len b) on characters, case and
    spaces as they are; two empty strings score 100; with several references the best one."""
    from rapidfuzz.distance import Levenshtein

    refs = _reference_lists(predictions, references)
    return [100.0 * max(Levenshtein.normalized_similarity(p, r) for r in rs) for p, rs in zip(predictions, refs)]


def exact_match(predictions: Sequence[str], references: Sequence[Reference]) -> list[float]:
    """100 for a prediction equal to (one of) its reference(s), else 0."""
    refs = _reference_lists(predictions, references)
    return [100.0 if p in rs else 0.0 for p, rs in zip(predictions, refs)]


def accuracy(predictions: Sequence[str], references: Sequence[str]) -> float:
    """Percentage of predictions equal to their reference label."""
    _check_pairs(predictions, references)
    return 100.0 * sum(p == r for p, r in zip(predictions, references)) / len(predictions)


# ---------------------------------------------------------------------------------------------- sweeps API

PerQuery = Callable[[Sequence[str], Sequence[Reference]], list[float]]


def _rouge_metric(rouge_type: str, stemmer: bool) -> PerQuery:
    def metric(predictions, references):
        return rouge_per_query(predictions, references, stemmer=stemmer, types=(rouge_type,))[rouge_type]

    metric.__doc__ = f"{rouge_type} F1 × 100 {'with' if stemmer else 'without'} Porter stemming."
    return metric


#: per-query metrics: name -> f(predictions, references) -> one score (0–100) per query
METRICS: dict[str, PerQuery] = {
    **{t: _rouge_metric(t, False) for t in ROUGE_TYPES},
    **{f"{t}_stem": _rouge_metric(t, True) for t in ROUGE_TYPES},
    "bleu1": bleu1,
    "sentence_sacrebleu": sentence_sacrebleu,
    "meteor": meteor,
    "levenshtein": levenshtein,
    "accuracy": exact_match,
}

#: corpus-level metrics: name -> f(predictions, references) -> one score (0–100) for the corpus
CORPUS_METRICS: dict[str, Callable[[Sequence[str], Sequence[Reference]], float]] = {
    "sacrebleu": corpus_sacrebleu,
}


def _check_names(names: Iterable[str], allowed: Iterable[str]) -> list[str]:
    names = list(names)
    allowed = list(allowed)
    if not names:
        raise ValueError("no metric names given")
    for name in names:
        if name not in allowed:
            hint = " (corpus-level: use evaluate or corpus_sacrebleu)" if name in CORPUS_METRICS else ""
            raise ValueError(f"unknown per-query metric {name!r}{hint}; valid: {', '.join(allowed)}")
    return names


def score(names: Iterable[str], predictions: Sequence[str], references: Sequence[Reference]) -> dict[str, list[float]]:
    """Per-query scores of each named metric of ``METRICS``; raises ``MetricUnavailable`` for one that cannot run
    here (``meteor`` without WordNet) and ``ValueError`` for a name outside ``METRICS``."""
    names = _check_names(names, METRICS)
    _reference_lists(predictions, references)
    return {name: METRICS[name](predictions, references) for name in names}


def summarize(per_query: Sequence[float], *, ddof: int = 0) -> dict[str, float]:
    """Mean and standard deviation of per-query scores (``ddof=0``, numpy's default, unless given)."""
    import numpy as np

    if len(per_query) == 0:
        raise ValueError("no scores to summarize")
    if len(per_query) <= ddof:
        raise ValueError(f"{len(per_query)} scores for ddof={ddof}")
    values = np.asarray(per_query, dtype=float)
    return {"mean": float(values.mean()), "std": float(values.std(ddof=ddof))}


@dataclass
class Evaluation:
    """``scores``: the mean of each per-query metric and the value of each corpus metric; ``per_query``: the
    per-query lists; ``skipped``: metric name -> why it could not be computed here and how to fix that."""

    scores: dict[str, float] = field(default_factory=dict)
    per_query: dict[str, list[float]] = field(default_factory=dict)
    skipped: dict[str, str] = field(default_factory=dict)


def evaluate(
    predictions: Sequence[str], references: Sequence[Reference], names: Iterable[str] | None = None
) -> Evaluation:
    """Every named metric (default: all of ``METRICS`` and ``CORPUS_METRICS``) that can run here; the others are
    listed in ``skipped`` with their reason. ``Evaluation.scores`` of each seed feed ``over_seeds``."""
    names = _check_names(list(METRICS) + list(CORPUS_METRICS) if names is None else names,
                         list(METRICS) + list(CORPUS_METRICS))
    _reference_lists(predictions, references)
    result = Evaluation()
    for name in names:
        try:
            if name in CORPUS_METRICS:
                result.scores[name] = CORPUS_METRICS[name](predictions, references)
            else:
                values = METRICS[name](predictions, references)
                result.per_query[name] = values
                result.scores[name] = math.fsum(values) / len(values)
        except MetricUnavailable as e:
            result.skipped[name] = e.reason
    return result


def over_seeds(scores_per_seed: Sequence[Mapping[str, float]]) -> dict[str, tuple[float, float]]:
    """Mean and sample standard deviation (ddof=1) of each metric's score across seeds; with a single seed the
    standard deviation is 0.0. Every seed must report the same metrics."""
    import numpy as np

    if not scores_per_seed:
        raise ValueError("no seeds to aggregate")
    names = list(scores_per_seed[0])
    for i, seed in enumerate(scores_per_seed):
        if set(seed) != set(names):
            diff = sorted(set(seed) ^ set(names))
            raise ValueError(f"seed {i} reports different metrics than seed 0: {', '.join(diff)}")
    out = {}
    for name in names:
        values = np.asarray([seed[name] for seed in scores_per_seed], dtype=float)
        std = float(values.std(ddof=1)) if len(values) >= 2 else 0.0
        out[name] = (float(values.mean()), std)
    return out
