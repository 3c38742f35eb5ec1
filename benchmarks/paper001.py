"""Paper 001's methods on real benchmark data: task metric at ε ∈ {1, 3, 8}, non-private aggregation (ε = ∞),
zero-shot and non-private few-shot, with the time spent per stage.

    .venv/bin/python benchmarks/paper001.py samsum [--queries 100]     # ESA, KSA joint-EM, KSA-PTR; ROUGE
    .venv/bin/python benchmarks/paper001.py sst2|agnews|trec           # RNM-Gaussian; accuracy

Settings come from the bundled configs (`dpicl/configs/<task>-<method>.yaml`); data from $DPICL_DATA (README, "Benchmark data").
As in the paper, every query's teachers answer once and each mechanism aggregates those same answers at
every ε (the budget is planned for the number of queries, δ from the paper). Non-private rows: "few-shot" is
the mean metric of the individual teachers' answers (001's "4-shot over all teachers"), "zero-shot" the greedy
answer without demonstrations, "ε = ∞" the aggregation without noise. One repetition (the paper averaged 5).
"""

from __future__ import annotations

import argparse
import json
import tempfile
import time
from collections import defaultdict
from contextlib import contextmanager
from pathlib import Path

import numpy as np

from dpicl import planning
from dpicl.config import load_config
from dpicl.embeddings.candidates import nearest_candidate
from dpicl.evaluation.sweep import nonprivate
from dpicl.inference.base import GenerationParams
from dpicl.inference.teachers import greedy_params, label_votes
from dpicl.methods.base import aggregate_as_planned
from dpicl.metrics import accuracy, rouge
from dpicl.privacy.rng import make_rng
from dpicl.privacy.sampling import assign_teachers, default_sampling_rate
from dpicl.prompts import keyword_prompt, render_prompt, zero_shot_prompt
from dpicl.storage import get_dataset, load_records
from dpicl.storage.db import connect
from dpicl.storage.ingest import ingest_source
from dpicl.tasks import context

TASKS = {
    "samsum": (["samsum-esa", "samsum-ksa-jem", "samsum-ksa-ptr"], 5e-5),
    "sst2": (["sst2-rnm"], 1e-4),
    "agnews": (["agnews-rnm"], 1e-4),
    "trec": (["trec-rnm"], 1e-4),
}
INF = float("inf")

timings: dict[str, float] = defaultdict(float)


@contextmanager
def stage(name: str):
    start = time.perf_counter()
    yield
    timings[name] += time.perf_counter() - start


def report(rows: dict[str, dict[str, float]], metrics: list[str], json_path: Path | None, meta: dict) -> None:
    """Print the results and the time per stage as markdown tables; also write them as JSON when asked."""
    print()
    print("| setting | " + " | ".join(metrics) + " |")
    print("|---|" + "---|" * len(metrics))
    for name, r in rows.items():
        print(f"| {name} | " + " | ".join(f"{r[k]:.2f}" if k in r else "" for k in metrics) + " |")
    print()
    print("| stage | seconds |")
    print("|---|---|")
    for name, seconds in timings.items():
        print(f"| {name} | {seconds:.1f} |")
    if json_path:
        json_path.write_text(json.dumps({**meta, "rows": rows, "timings_s": timings}, indent=2))


def score(cfg, answers: list[str], references: list[str]) -> dict[str, float]:
    if cfg.task.type == "classification":
        return {"accuracy": accuracy(answers, references)}
    return rouge(answers, references)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("task", choices=sorted(TASKS))
    parser.add_argument("--queries", type=int, default=100)
    parser.add_argument("--epsilons", type=float, nargs="+", default=[1.0, 3.0, 8.0])
    parser.add_argument("--json", type=Path, help="also write the results here")
    args = parser.parse_args()
    names, delta = TASKS[args.task]
    configs = [load_config(n) for n in names]
    base = configs[0]
    for cfg in configs[1:]:  # the teachers' answers are shared, so must be their settings
        assert (cfg.task, cfg.model, cfg.generation, cfg.method.teachers, cfg.method.shots) == (
            base.task, base.model, base.generation, base.method.teachers, base.method.shots)

    with tempfile.TemporaryDirectory() as tmp:
        con = connect(Path(tmp) / "bench.duckdb")
        with stage("ingest"):
            for source in base.data:
                ingest_source(con, source)
        records = load_records(con, base.private_dataset)
        dataset = get_dataset(con, base.private_dataset)
        queries = con.execute("SELECT input, reference FROM queries WHERE backlog = ? ORDER BY row_no LIMIT ?",
                              [base.backlog, args.queries]).fetchall()
        con.close()
    references = [r for _, r in queries]
    n, shots = base.method.teachers, base.method.shots
    rate = base.method.sampling_rate or default_sampling_rate(n, shots, len(records))
    print(f"{args.task}: {len(records)} private records, {len(queries)} queries, {n} teachers × {shots} shots, "
          f"q = {rate:.6f}, δ = {delta:g}", flush=True)

    rng = make_rng()
    with stage("sample + prompt"):
        teacher_prompts, zero_shot = [], []
        by_id = {r.record_id: r for r in records}
        for query, _ in queries:
            groups = assign_teachers(list(by_id), dataset["teacher_key"], n, shots, rate, rng)
            teacher_prompts.append([render_prompt(base.task, [(by_id[i].input, by_id[i].output) for i in g], query)
                                    for g in groups])
            zero_shot.append(zero_shot_prompt(base.task, query))
    backend = context.backend(base)
    flat = [p for prompts in teacher_prompts for p in prompts]
    features = [{"zero_shot": z} for z in zero_shot]
    rows: dict[str, dict[str, float]] = {}
    if base.task.type == "classification":
        with stage("infer: teachers"):
            votes = label_votes(backend, flat, base)
        with stage("infer: zero-shot"):
            zero_answers = [base.task.labels[v] for v in label_votes(backend, zero_shot, base)]
        for i, f in enumerate(features):
            f["teacher_votes"] = votes[i * n:(i + 1) * n]
        teacher_answers = [[base.task.labels[v] for v in f["teacher_votes"]] for f in features]
    else:
        with stage("infer: teachers"):
            outputs = backend.generate(flat, greedy_params(base), progress=True)
        with stage("infer: zero-shot"):
            zero_answers = backend.generate(zero_shot, greedy_params(base), progress=True)
        for i, f in enumerate(features):
            f["teacher_outputs"] = outputs[i * n:(i + 1) * n]
        teacher_answers = [f["teacher_outputs"] for f in features]
    greedy_answers = dict(zip(zero_shot, zero_answers))
    rows["zero-shot"] = score(base, zero_answers, references)
    per_teacher = [score(base, [a[t] for a in teacher_answers], references) for t in range(n)]
    rows[f"few-shot ({shots}-shot, mean of teachers)"] = {k: float(np.mean([s[k] for s in per_teacher]))
                                                           for k in per_teacher[0]}

    for cfg in configs:
        method = cfg.method.name
        if method == "esa":
            with stage("esa: candidates + embed"):
                m = cfg.method
                params = GenerationParams(max_new_tokens=cfg.generation.max_new_tokens,
                                          temperature=m.candidate_temperature, top_p=m.candidate_top_p,
                                          stop=tuple(cfg.generation.stop))
                candidates = backend.generate([z for z in zero_shot for _ in range(m.candidates)], params,
                                              progress=True)
                encoder = context.encoder(cfg)
                teacher_vectors = encoder.encode(outputs, progress=True)
                candidate_vectors = encoder.encode(candidates, progress=True)
            for i, f in enumerate(features):
                f["teachers"] = teacher_vectors[i * n:(i + 1) * n]
        for eps in [*args.epsilons, INF]:
            label = f"{method} ε={'∞ (non-private aggregation)' if eps == INF else f'{eps:g}'}"
            with stage(f"{method}: plan"):
                plan = None if eps == INF else planning.plan_with_settings(
                    cfg, sampling_rate=rate, queries=len(queries), epsilon=eps, delta=delta)
            with stage(f"{method}: aggregate"):
                results = [nonprivate(cfg, f, rng) if plan is None else aggregate_as_planned(cfg, plan, f, rng)
                           for f in features]
            with stage(f"{method}: release"):
                if method == "esa":
                    c = cfg.method.candidates
                    answers = [candidates[i * c + nearest_candidate(r, candidate_vectors[i * c:(i + 1) * c])]
                               for i, r in enumerate(results)]
                elif method == "rnm":
                    answers = [cfg.task.labels[r["label"]] for r in results]
                else:
                    prompts = [z if r["keywords"] is None else
                               keyword_prompt(cfg.task, cfg.method.keyword_template, q, r["keywords"])
                               for z, (q, _), r in zip(zero_shot, queries, results)]
                    # greedy answers are a function of the prompt: a failed PTR test reuses the zero-shot answer
                    todo = sorted({p for p in prompts if p not in greedy_answers})
                    greedy_answers.update(zip(todo, backend.generate(todo, greedy_params(cfg), progress=True)))
                    answers = [greedy_answers[p] for p in prompts]
            rows[label] = score(cfg, answers, references)
            if method == "ksa-ptr":
                rows[label]["ptr_passed_%"] = 100.0 * sum(r["keywords"] is not None for r in results) / len(results)
            print(f"{label}: {rows[label]}", flush=True)

    metrics = sorted({k for r in rows.values() for k in r}, key=lambda k: (k.startswith("ptr"), k))
    report(rows, metrics, args.json, {"task": args.task, "queries": len(queries), "teachers": n, "shots": shots,
                                      "sampling_rate": rate, "delta": delta})


if __name__ == "__main__":
    main()
