"""Privacy–utility sweeps: the methods of one ensemble setting × ε on a benchmark dataset, scored against its
references (the computation behind flow `evaluate`).

As in papers 001 and 004, every repetition samples each query's teachers once and every method aggregates those
same answers at every ε, with the budget planned for the number of queries swept; "ε = ∞" is the aggregation
without noise, "zero-shot" the greedy answer without demonstrations, "few-shot" the mean metric of the individual
teachers' answers. A sweep releases nothing and charges no ledger: it is a benchmark tool. Its non-private rows
describe the private data, so run it on benchmark data, not on production datasets.

Methods: the ensemble methods of the registry (`dpicl methods`), each aggregating with its own `aggregate` (or its
noise-free `nonprivate`) and answering with its own `release`, as in the pipeline; the token-level methods have
`benchmarks/token_level.py`.
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

import numpy as np

from dpicl import methods, planning
from dpicl.config import Config
from dpicl.embeddings.candidates import consensus, most_similar_texts
from dpicl.embeddings.relevance import record_vectors, relevance
from dpicl.inference.teachers import greedy_params, label_votes
from dpicl.methods.base import aggregate_as_planned
from dpicl.metrics import evaluate as evaluate_metrics
from dpicl.privacy.sampling import assign_teachers, default_sampling_rate
from dpicl.prompts import (
    fewshot_records,
    public_ensemble,
    public_key,
    render_prompt,
    zero_shot_prompt,
)
from dpicl.storage import get_dataset, load_records
from dpicl.storage.db import connect
from dpicl.storage.ingest import ingest_source

INF = math.inf
# free baselines: each embedded set of public texts answered by its own consensus (the text nearest the others)
FREE_CONSENSUS = {"public_outputs": "public consensus", "candidates": "zero-shot consensus"}


def _method(cfg: Config):
    return methods.get(cfg.method.name)


def _sweepable() -> list[str]:
    return [m.name for m in methods.all_methods() if m.kind == "ensemble"]


class SweepError(ValueError):
    """The sweep's configs cannot be evaluated together."""


def _ensemble(cfg: Config) -> tuple:
    """What decides a config's private teachers' prompts and answers: configs of one sweep share them."""
    return (cfg.private_dataset, cfg.backlog, cfg.task, cfg.model, cfg.generation, cfg.method.teachers,
            cfg.method.shots, cfg.method.sampling_rate, cfg.method.private_demonstrations)


def check_configs(configs: Sequence[Config]) -> Config:
    """The configs must share the data and the ensemble (their teachers' answers are shared); returns the first."""
    if not configs:
        raise SweepError("give at least one config to evaluate")
    base = configs[0]
    for cfg in configs:
        if _method(cfg).kind != "ensemble":
            raise SweepError(f"config {cfg.name!r}: method {cfg.method.name!r} cannot be swept here (sweeps take "
                             f"{', '.join(_sweepable())}; the token-level methods have benchmarks/token_level.py)")
        if not cfg.data:
            raise SweepError(f"config {cfg.name!r} lists no files under `data:`; a sweep reads its data from there")
        if _ensemble(cfg) != _ensemble(base):
            raise SweepError(f"configs {base.name!r} and {cfg.name!r} differ in data, task, model, generation, "
                             "teachers, shots, sampling_rate or private_demonstrations; a sweep shares one ensemble "
                             "between its methods")
    publics = {(cfg.public_dataset, cfg.method.public_demonstrations, cfg.method.public_shot_count,
                cfg.method.public_fewshot) for cfg in configs if _method(cfg).needs_public}
    if len(publics) > 1:
        raise SweepError("the public-data methods of one sweep must share one public dataset and the public "
                         "teachers' settings (public_demonstrations, public_shots, public_fewshot)")
    method_labels(configs)  # refuses two configs of one method under one name
    return base


def method_labels(configs: Sequence[Config]) -> list[str]:
    """How the sweep's rows name each config's method: the method's name, or "method (config name)" where several
    configs use one method (two values of k, two prompts), so that their rows stay apart."""
    uses = Counter(cfg.method.name for cfg in configs)
    labels = [cfg.method.name if uses[cfg.method.name] == 1 else f"{cfg.method.name} ({cfg.name})"
              for cfg in configs]
    for label, count in Counter(labels).items():
        if count > 1:
            raise SweepError(f"{count} configs of the sweep are {label}: give each its own `name:` so that their "
                             "rows can be told apart")
    return labels


def default_delta(n_records: int) -> float:
    """1/n^1.1, below 1/n (paper 004's choice), rounded to two significant digits."""
    return float(f"{n_records ** -1.1:.2g}")


@dataclass
class Ensemble:
    """One repetition's shared inference. Holds private text: it lives in process memory only."""

    cfg: Config
    references: list[str]
    sampling_rate: float
    delta: float
    answers: dict[str, list]  # baseline rows: "zero-shot" → answers, "few-shot" → per-teacher answer lists
    features: list[dict]  # per query: what the aggregators read
    queries: list[str]
    greedy: dict[str, str] = field(default_factory=dict)  # prompt → greedy answer (generated once)


def load_benchmark(configs: Sequence[Config], queries: int):
    """Private records, public pairs, the private dataset's row and (input, reference) of the first queries,
    read into a scratch in-memory database: a sweep never touches the production database's datasets."""
    base = configs[0]
    con = connect(":memory:")
    try:
        for source in {s.name: s for cfg in configs for s in cfg.data}.values():
            ingest_source(con, source)
        private = load_records(con, base.private_dataset)
        public_name = next((c.public_dataset for c in configs if _method(c).needs_public), None)
        public = [(r.input, r.output) for r in load_records(con, public_name)] if public_name else []
        dataset = get_dataset(con, base.private_dataset)
        rows = con.execute("SELECT input, reference FROM queries WHERE backlog = ? ORDER BY row_no LIMIT ?",
                           [base.backlog, queries]).fetchall()
    finally:
        con.close()
    if not rows:
        raise SweepError(f"backlog {base.backlog!r} has no queries")
    if any(reference is None for _, reference in rows):
        raise SweepError(f"backlog {base.backlog!r} has queries without a reference; a sweep scores against them")
    return private, public, dataset, rows


def build_ensemble(configs: Sequence[Config], data, backend, encoder_for: Callable[[Config], object],
                   rng: np.random.Generator, delta: float | None = None, teacher_key: bytes | None = None,
                   groups: Sequence[Sequence[Sequence[str]]] | None = None,
                   progress: Callable[[str], None] = lambda stage: None) -> Ensemble:
    """Sample and prompt every query's teachers, then run every backend call the methods need, batched.
    `teacher_key` replaces the random key of the scratch ingest (for reproducible benchmark runs); `groups`
    (per query, the record ids of each teacher) replaces the sampling altogether (membership inference places
    its targets itself)."""
    base = check_configs(configs)
    private, public, dataset, rows = data
    n, shots = base.method.teachers, base.method.shots
    rate = base.method.sampling_rate or default_sampling_rate(n, shots, len(private))
    by_id = {r.record_id: r for r in private}
    queries = [q for q, _ in rows]
    teacher_prompts, public_prompts, examples, demos = [], [], [], []
    public_cfg = next((c for c in configs if _method(c).needs_public), None)
    ranked = None  # the public records most similar to each query first, when the public teachers show those
    if public and public_cfg is not None and public_cfg.method.public_demonstrations == "nearest":
        ranked = most_similar_texts(encoder_for(public_cfg), queries, [inp for inp, _ in public],
                                    public_cfg.method.public_ranked_count)
    if groups is not None and (len(groups) != len(queries) or any(len(g) != n for g in groups)):
        raise SweepError(f"teacher groupings must give {n} teachers for each of the {len(queries)} queries")
    if groups is not None and base.method.private_demonstrations == "nearest":
        raise SweepError("the teachers' records are given (`groups`), so `private_demonstrations: nearest` would be "
                         "ignored; use a config with `private_demonstrations: random` here")
    scores = [None] * len(queries)  # each query's relevance of every record, where the teachers show the nearest
    if base.method.private_demonstrations == "nearest":
        encoder = encoder_for(base)
        scores = relevance(encoder, queries, private, record_vectors(encoder, private))
    for k, query in enumerate(queries):
        shown = groups[k] if groups is not None else \
            assign_teachers(list(by_id), teacher_key or dataset["teacher_key"], n, shots, rate, rng, scores[k])
        teacher_prompts += [render_prompt(base.task, [(by_id[i].input, by_id[i].output) for i in g], query)
                            for g in shown]
        if public and public_cfg is not None:  # the public ensemble only for the public-data methods
            prompts, example = public_ensemble(base.task, public, query, n, public_cfg.method.public_shot_count,
                                               public_key(public_cfg.public_dataset, query),
                                               None if ranked is None else ranked[k],
                                               public_cfg.method.public_fewshot)
            public_prompts += prompts
            examples.append(example)
            if public_cfg.method.public_fewshot is not None:
                demos.append([public[i] for i in fewshot_records(ranked[k], public_cfg.method.public_fewshot)])
    zero_shot = [zero_shot_prompt(base.task, q) for q in queries]
    ens = Ensemble(cfg=base, references=[r for _, r in rows], sampling_rate=rate,
                   delta=delta or default_delta(len(private)), answers={}, queries=queries,
                   features=[{"zero_shot": z} for z in zero_shot])
    per_query = lambda flat: [flat[i * n:(i + 1) * n] for i in range(len(queries))]  # noqa: E731
    if base.task.type == "classification":
        progress("infer: teachers")
        votes = per_query(label_votes(backend, teacher_prompts, base, [q for q in queries for _ in range(n)]))
        progress("infer: zero-shot")
        ens.answers["zero-shot"] = [base.task.labels[v] for v in label_votes(backend, zero_shot, base, queries)]
        ens.answers["few-shot"] = [[base.task.labels[v] for v in vs] for vs in votes]
        for f, vs in zip(ens.features, votes):
            f["teacher_votes"] = vs
        return ens
    greedy = greedy_params(base)
    progress("infer: teachers")
    outputs = backend.generate(teacher_prompts, greedy, progress=True)
    progress("infer: zero-shot")
    ens.answers["zero-shot"] = backend.generate(zero_shot, greedy, progress=True)
    ens.greedy.update(zip(zero_shot, ens.answers["zero-shot"]))
    ens.answers["few-shot"] = per_query(outputs)
    for f, outs in zip(ens.features, per_query(outputs)):
        f["teacher_outputs"] = outs
    if public_prompts:
        progress("infer: public teachers")
        flat = backend.generate(public_prompts, greedy, progress=True)
        per = len(public_prompts) // len(queries)  # the teachers' prompts, then the few-shot one if asked for
        public_outputs = [flat[i * per:(i + 1) * per] for i in range(len(queries))]
        ens.answers["public few-shot"] = [outs[:n] for outs in public_outputs]
        if per > n:
            ens.answers[f"public {public_cfg.method.public_fewshot}-shot"] = [outs[n] for outs in public_outputs]
        for f, outs in zip(ens.features, public_outputs):
            f["public_outputs"] = outs
    for f, example in zip(ens.features, examples):
        f["public_example"] = example
    for f, pairs in zip(ens.features, demos):
        f["public_demos"] = pairs
    sampling = next((c for c in configs if _method(c).samples_candidates), None)
    if sampling is not None:
        progress("zero-shot candidates")
        for f, group in zip(ens.features, _method(sampling).sample_candidates(sampling, backend, zero_shot, True)):
            f["candidates"] = group
    embedded = {_method(c).public_texts for c in configs} - {None}
    if embedded:  # the teacher outputs and each method's public texts, as the embed stage names them
        embedder = next(encoder_for(c) for c in configs if _method(c).public_texts is not None)
        progress("embed")
        for f, vectors in zip(ens.features, per_query(embedder.encode(outputs, progress=True))):
            f["teachers"] = vectors
        for public_texts in embedded:
            texts = [f[public_texts.source] for f in ens.features]
            flat = embedder.encode([t for group in texts for t in group], progress=True, batched=True)  # public
            start = 0
            for f, group in zip(ens.features, texts):
                f[public_texts.texts] = group
                f[public_texts.embeddings] = flat[start:start + len(group)]
                start += len(group)
            ens.answers[FREE_CONSENSUS[public_texts.source]] = [
                f[public_texts.texts][consensus(f[public_texts.embeddings])] for f in ens.features]
    return ens


def nonprivate(cfg: Config, inputs: dict, rng: np.random.Generator):
    """The method's aggregate without noise (the papers' "ε = ∞" rows)."""
    return _method(cfg).nonprivate(cfg, inputs, rng)


class _CachedGreedy:
    """The backend, with greedy answers generated once per distinct prompt and repetition (methods share them)."""

    def __init__(self, ens: Ensemble, backend):
        self._ens, self._backend = ens, backend

    def generate(self, prompts, params, progress=False):
        if params != greedy_params(self._ens.cfg):
            return self._backend.generate(prompts, params, progress=progress)
        todo = sorted({p for p in prompts if p not in self._ens.greedy})
        if todo:
            self._ens.greedy.update(zip(todo, self._backend.generate(todo, params, progress=progress)))
        return [self._ens.greedy[p] for p in prompts]

    def __getattr__(self, name):
        return getattr(self._backend, name)


def release_answers(cfg: Config, ens: Ensemble, results: list, backend) -> dict[str, list[str]]:
    """The method's own release of each aggregate, as the pipeline's release stage calls it, keyed by row suffix."""
    method = _method(cfg)
    ids = [str(i) for i in range(len(results))]
    aggregates = dict(zip(ids, results))
    public = {q: {k: f[k] for k in method.release_needs if k in f} for q, f in zip(ids, ens.features)}
    queries = dict(zip(ids, ens.queries))
    cached = _CachedGreedy(ens, backend)
    out = {}
    for suffix, variant in method.evaluation_variants(cfg).items():
        answers = {q: a for q, a, _ in method.release(variant, aggregates, public, queries, cached)}
        out[suffix] = [answers[q] for q in ids]
    return out


def method_answers(cfg: Config, ens: Ensemble, epsilon: float, backend, rng: np.random.Generator,
                   plan: dict | None = None):
    """The answers of one method at one ε (INF: without noise), keyed by a row suffix ("" for the method's own
    row; SGA also gives its top-1 candidate), and the share of passed PTR tests where that applies. `plan`: the
    method's plan for ε when the caller already made it (calibration can take a minute)."""
    if plan is None and epsilon != INF:
        plan = planning.plan_with_settings(cfg, sampling_rate=ens.sampling_rate, queries=len(ens.queries),
                                           epsilon=epsilon, delta=ens.delta)
    results = [nonprivate(cfg, f, rng) if plan is None else aggregate_as_planned(cfg, plan, f, rng)
               for f in ens.features]
    return release_answers(cfg, ens, results, backend), _method(cfg).pass_rate(results)


def default_metrics(cfg: Config) -> list[str]:
    """Accuracy for classification, ROUGE-1/2/L F1 (no stemming, as 001) otherwise."""
    return ["accuracy"] if cfg.task.type == "classification" else ["rouge1", "rouge2", "rougeL"]


def score(cfg: Config, answers: Sequence[str], references: Sequence[str], names: Sequence[str] | None) -> dict:
    """Mean of each metric (names of `dpicl.metrics`); metrics that cannot run here are left out (see
    `unavailable_metrics`)."""
    return evaluate_metrics(answers, references, list(names or default_metrics(cfg))).scores


def unavailable_metrics(cfg: Config, names: Sequence[str] | None) -> dict[str, str]:
    """Metric → why it cannot run here and how to fix that (e.g. METEOR without NLTK's WordNet data)."""
    return evaluate_metrics(["a"], ["a"], list(names or default_metrics(cfg))).skipped
