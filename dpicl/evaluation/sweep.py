"""Privacy–utility sweeps: the methods of one ensemble setting × ε on a benchmark dataset, scored against its
references (the computation behind flow `evaluate`).

As in papers 001 and 004, every repetition samples each query's teachers once and every method aggregates those
same answers at every ε, with the budget planned for the number of queries swept; "ε = ∞" is the aggregation
without noise, "zero-shot" the greedy answer without demonstrations, "few-shot" the mean metric of the individual
teachers' answers. A sweep releases nothing and charges no ledger: it is a benchmark tool. Its non-private rows
describe the private data, so run it on benchmark data, not on production datasets.

Methods: the sample-level ones (esa, rnm, ksa-jem, ksa-ptr, sga, ksa-public); the token-level methods have
`benchmarks/token_level.py`.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

import numpy as np

from dpicl import planning
from dpicl.config import Config
from dpicl.embeddings.candidates import nearest_candidate, public_candidates
from dpicl.inference.base import GenerationParams
from dpicl.inference.teachers import greedy_params, label_votes
from dpicl.keywords import keywords
from dpicl.methods.base import aggregate_as_planned
from dpicl.methods.ksa_public import public_domain
from dpicl.methods.sga import selection as sga_prompt
from dpicl.metrics import evaluate as evaluate_metrics
from dpicl.privacy.mechanisms import dpm, joint_em, ksa_ptr
from dpicl.privacy.sampling import assign_teachers, default_sampling_rate
from dpicl.prompts import (
    keyword_prompt,
    public_ensemble,
    public_key,
    render_prompt,
    zero_shot_prompt,
)
from dpicl.storage import get_dataset, load_records
from dpicl.storage.db import connect
from dpicl.storage.ingest import ingest_source

INF = math.inf
SWEEP_METHODS = ("esa", "rnm", "ksa-jem", "ksa-ptr", "sga", "ksa-public")


class SweepError(ValueError):
    """The sweep's configs cannot be evaluated together."""


def check_configs(configs: Sequence[Config]) -> Config:
    """The configs must share the data and the ensemble (their teachers' answers are shared); returns the first."""
    if not configs:
        raise SweepError("give at least one config to evaluate")
    base = configs[0]
    for cfg in configs:
        if cfg.method.name not in SWEEP_METHODS:
            raise SweepError(f"config {cfg.name!r}: method {cfg.method.name!r} cannot be swept here (sweeps take "
                             f"{', '.join(SWEEP_METHODS)}; the token-level methods have benchmarks/token_level.py)")
        if not cfg.data:
            raise SweepError(f"config {cfg.name!r} lists no files under `data:`; a sweep reads its data from there")
        same = (cfg.private_dataset, cfg.backlog, cfg.task, cfg.model, cfg.generation, cfg.method.teachers,
                cfg.method.shots)
        if same != (base.private_dataset, base.backlog, base.task, base.model, base.generation,
                    base.method.teachers, base.method.shots):
            raise SweepError(f"configs {base.name!r} and {cfg.name!r} differ in data, task, model, generation, "
                             "teachers or shots; a sweep shares one ensemble between its methods")
    publics = {cfg.public_dataset for cfg in configs if cfg.method.name in ("sga", "ksa-public")}
    if len(publics) > 1:
        raise SweepError("the public-data methods of one sweep must share one public dataset")
    return base


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
    examples: list[str] = field(default_factory=list)
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
        public_name = next((c.public_dataset for c in configs if c.method.name in ("sga", "ksa-public")), None)
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
    methods = {cfg.method.name for cfg in configs}
    n, shots = base.method.teachers, base.method.shots
    rate = base.method.sampling_rate or default_sampling_rate(n, shots, len(private))
    by_id = {r.record_id: r for r in private}
    queries = [q for q, _ in rows]
    teacher_prompts, public_prompts, examples = [], [], []
    public_name = next((c.public_dataset for c in configs if c.method.name in ("sga", "ksa-public")), None)
    if groups is not None and (len(groups) != len(queries) or any(len(g) != n for g in groups)):
        raise SweepError(f"teacher groupings must give {n} teachers for each of the {len(queries)} queries")
    for k, query in enumerate(queries):
        shown = groups[k] if groups is not None else \
            assign_teachers(list(by_id), teacher_key or dataset["teacher_key"], n, shots, rate, rng)
        teacher_prompts += [render_prompt(base.task, [(by_id[i].input, by_id[i].output) for i in g], query)
                            for g in shown]
        if public and public_name is not None:  # the public ensemble only for the public-data methods
            prompts, example = public_ensemble(base.task, public, query, n, shots, public_key(public_name, query))
            public_prompts += prompts
            examples.append(example)
    zero_shot = [zero_shot_prompt(base.task, q) for q in queries]
    ens = Ensemble(cfg=base, references=[r for _, r in rows], sampling_rate=rate,
                   delta=delta or default_delta(len(private)), answers={}, queries=queries, examples=examples,
                   features=[{"zero_shot": z} for z in zero_shot])
    per_query = lambda flat: [flat[i * n:(i + 1) * n] for i in range(len(queries))]  # noqa: E731
    if base.task.type == "classification":
        progress("infer: teachers")
        votes = per_query(label_votes(backend, teacher_prompts, base))
        progress("infer: zero-shot")
        ens.answers["zero-shot"] = [base.task.labels[v] for v in label_votes(backend, zero_shot, base)]
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
        public_outputs = per_query(backend.generate(public_prompts, greedy, progress=True))
        ens.answers["public few-shot"] = public_outputs
        for f, outs in zip(ens.features, public_outputs):
            f["public_outputs"] = outs
    embedder = next((encoder_for(c) for c in configs if c.method.name in ("esa", "sga")), None)
    if embedder is not None:
        progress("embed")
        for f, vectors in zip(ens.features, per_query(embedder.encode(outputs, progress=True))):
            f["teachers"] = vectors
        if public_prompts and "sga" in methods:
            for f, vectors in zip(ens.features, per_query(embedder.encode(
                    [o for f in ens.features for o in f["public_outputs"]], progress=True))):
                f["public"] = vectors
    esa = next((c for c in configs if c.method.name == "esa"), None)
    if esa is not None:
        progress("esa: zero-shot candidates")
        m, c = esa.method, esa.method.candidates
        params = GenerationParams(max_new_tokens=esa.generation.max_new_tokens, temperature=m.candidate_temperature,
                                  top_p=m.candidate_top_p, stop=tuple(esa.generation.stop))
        candidates = backend.generate([z for z in zero_shot for _ in range(c)], params, progress=True)
        vectors = embedder.encode(candidates, progress=True)
        for i, f in enumerate(ens.features):
            f["candidates"], f["candidate_vectors"] = candidates[i * c:(i + 1) * c], vectors[i * c:(i + 1) * c]
    return ens


def nonprivate(cfg: Config, inputs: dict, rng: np.random.Generator):
    """The method's aggregate without noise (the papers' "ε = ∞" rows)."""
    method = cfg.method.name
    if method == "esa":
        return inputs["teachers"].mean(axis=0)
    if method == "rnm":
        votes = np.asarray(inputs["teacher_votes"])
        return {"label": int(np.argmax(np.bincount(votes, minlength=len(cfg.task.labels))))}
    if method == "sga":
        levels = cfg.method.levels
        params = dpm.DPMParams(em_epsilons=(INF,) * levels, count_scales=(0.0,) * levels, noise_std=0.0,
                               interval=dpm.interval_size(inputs["public"], rng))
        clusters = dpm.cluster(np.concatenate([inputs["teachers"], inputs["public"]]), params, rng)
        return {"centres": [c.centre for c in clusters], "counts": [c.noisy_count for c in clusters]}
    sets = [keywords(t) for t in inputs["teacher_outputs"]]
    if method == "ksa-ptr":
        tokens, counts = ksa_ptr.histogram(sets)
        if len(tokens) == 0:
            return {"keywords": None}
        return {"keywords": list(tokens[:int(np.argmax(ksa_ptr.gaps(counts, cfg.method.k_max))) + 1])}
    domain = (public_domain(inputs["public_outputs"], inputs["zero_shot"]) if method == "ksa-public"
              else keywords(inputs["zero_shot"]))
    counts = joint_em.histogram_on_domain(sets, domain)
    return {"keywords": [domain[i] for i in np.argsort(-counts, kind="stable")[:min(cfg.method.k, len(domain))]]}


def _greedy(ens: Ensemble, backend, prompts: list[str]) -> list[str]:
    """Greedy answers are a function of the prompt: each distinct prompt is generated once per repetition."""
    todo = sorted({p for p in prompts if p not in ens.greedy})
    if todo:
        ens.greedy.update(zip(todo, backend.generate(todo, greedy_params(ens.cfg), progress=True)))
    return [ens.greedy[p] for p in prompts]


def release_answers(cfg: Config, ens: Ensemble, results: list, backend) -> dict[str, list[str]]:
    """Post-processing of the aggregates into answers, as the pipeline's release stage does."""
    method = cfg.method.name
    if method == "esa":
        return {"": [f["candidates"][nearest_candidate(r, f["candidate_vectors"])]
                     for r, f in zip(results, ens.features)]}
    if method == "rnm":
        return {"": [cfg.task.labels[r["label"]] for r in results]}
    if method == "sga":
        chosen = [public_candidates(r["centres"], f["public"], f["public_outputs"], cfg.method.k)
                  for r, f in zip(results, ens.features)]
        top1 = [f["public_outputs"][c[0]] for c, f in zip(chosen, ens.features)]
        prompts = [sga_prompt(cfg, q, [f["public_outputs"][i] for i in c], ex)
                   for q, c, f, ex in zip(ens.queries, chosen, ens.features, ens.examples)]
        picked = iter(_greedy(ens, backend, [p for p in prompts if p is not None]))
        return {" top-1": top1, "": [t if p is None else next(picked) for p, t in zip(prompts, top1)]}
    examples = ens.examples if method == "ksa-public" else [""] * len(results)
    prompts = [f["zero_shot"] if r["keywords"] is None else
               keyword_prompt(cfg.task, cfg.method.keyword_template, q, r["keywords"], example=ex)
               for f, q, r, ex in zip(ens.features, ens.queries, results, examples)]
    return {"": _greedy(ens, backend, prompts)}


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
    passed = (sum(r["keywords"] is not None for r in results) / len(results)
              if cfg.method.name == "ksa-ptr" else None)
    return release_answers(cfg, ens, results, backend), passed


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
