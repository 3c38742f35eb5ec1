"""Paper 004's methods on SAMSum (or ChatDoctor): SGA top-k (LLM selection), SGA top-1 and KSA with public data at
ε ∈ {1, 3, 8} and without noise (ε = ∞), next to zero-shot and non-private few-shot, with the time per stage.

    .venv/bin/python benchmarks/paper004.py samsum [--queries 100]
    .venv/bin/python benchmarks/paper004.py chatdoctor

Settings come from the bundled configs (`dpicl/configs/<task>-sga.yaml`, `<task>-ksa-public.yaml`): the private
and public pools are a disjoint 2:1 split of the training file, the queries come from the test file. Every query's
private and public teachers answer once and each mechanism aggregates those answers at every ε, the budget planned
for the number of queries (δ = 1/|private pool|^1.1, below 1/n). ROUGE-1/2/L F1 with the Porter stemmer, as paper
004 scores; for ChatDoctor also BLEU-1 (NLTK, smoothing 4) and METEOR (when NLTK's WordNet data is installed).
"few-shot" is the mean over the private teachers,
"public few-shot" over the public ones. One repetition.
"""

from __future__ import annotations

import argparse
import tempfile
from pathlib import Path

import numpy as np
from paper001 import report, stage  # run as a script: benchmarks/ is on sys.path

from dpicl import planning
from dpicl.config import load_config
from dpicl.embeddings.candidates import public_candidates
from dpicl.evaluation.sweep import nonprivate
from dpicl.inference.teachers import greedy_params
from dpicl.methods.base import aggregate_as_planned
from dpicl.methods.sga import selection as sga_prompt
from dpicl.metrics import evaluate
from dpicl.privacy.rng import make_rng
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
from dpicl.tasks import context

INF = float("inf")


def score(task: str, answers: list[str], references: list[str]) -> dict[str, float]:
    names = ["rouge1_stem", "rouge2_stem", "rougeL_stem"] + (["bleu1", "meteor"] if task == "chatdoctor" else [])
    result = evaluate(answers, references, names)
    for name, reason in result.skipped.items():
        print(f"{name} skipped: {reason}", flush=True)
    return {name.removesuffix("_stem"): value for name, value in result.scores.items()}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("task", choices=["samsum", "chatdoctor"])
    parser.add_argument("--queries", type=int, default=100)
    parser.add_argument("--epsilons", type=float, nargs="+", default=[1.0, 3.0, 8.0])
    parser.add_argument("--json", type=Path, help="also write the results here")
    args = parser.parse_args()
    sga_cfg, ksa_cfg = load_config(f"{args.task}-sga"), load_config(f"{args.task}-ksa-public")
    assert (sga_cfg.task, sga_cfg.model, sga_cfg.generation, sga_cfg.method.teachers, sga_cfg.method.shots) == (
        ksa_cfg.task, ksa_cfg.model, ksa_cfg.generation, ksa_cfg.method.teachers, ksa_cfg.method.shots)
    cfg = sga_cfg

    with tempfile.TemporaryDirectory() as tmp:
        con = connect(Path(tmp) / "bench.duckdb")
        with stage("ingest"):
            for source in cfg.data:
                ingest_source(con, source)
        private = load_records(con, cfg.private_dataset)
        public = [(r.input, r.output) for r in load_records(con, cfg.public_dataset)]
        dataset = get_dataset(con, cfg.private_dataset)
        queries = con.execute("SELECT input, reference FROM queries WHERE backlog = ? ORDER BY row_no LIMIT ?",
                              [cfg.backlog, args.queries]).fetchall()
        con.close()
    references = [r for _, r in queries]
    n, shots = cfg.method.teachers, cfg.method.shots
    rate = cfg.method.sampling_rate or default_sampling_rate(n, shots, len(private))
    delta = float(f"{len(private) ** -1.1:.2g}")
    print(f"{args.task}: {len(private)} private / {len(public)} public records, {len(queries)} queries, {n} + {n} "
          f"teachers × {shots} shots, q = {rate:.6f} (private pool), δ = {delta:g}", flush=True)

    rng = make_rng()
    with stage("sample + prompt"):
        by_id = {r.record_id: r for r in private}
        teacher_prompts, public_prompts, examples, zero_shot = [], [], [], []
        for query, _ in queries:
            groups = assign_teachers(list(by_id), dataset["teacher_key"], n, shots, rate, rng)
            teacher_prompts.append([render_prompt(cfg.task, [(by_id[i].input, by_id[i].output) for i in g], query)
                                    for g in groups])
            prompts, example = public_ensemble(cfg.task, public, query, n, shots, public_key(cfg.public_dataset, query))
            public_prompts.append(prompts)
            examples.append(example)
            zero_shot.append(zero_shot_prompt(cfg.task, query))
    backend = context.backend(cfg)
    greedy = greedy_params(cfg)
    with stage("infer: private teachers"):
        private_out = backend.generate([p for ps in teacher_prompts for p in ps], greedy, progress=True)
    with stage("infer: public teachers"):
        public_out = backend.generate([p for ps in public_prompts for p in ps], greedy, progress=True)
    with stage("infer: zero-shot"):
        zero_answers = backend.generate(zero_shot, greedy, progress=True)
    with stage("embed"):
        encoder = context.encoder(cfg)
        private_vec, public_vec = encoder.encode(private_out, progress=True), encoder.encode(public_out, progress=True)
    features = [{"teacher_outputs": private_out[i * n:(i + 1) * n], "public_outputs": public_out[i * n:(i + 1) * n],
                 "teachers": private_vec[i * n:(i + 1) * n], "public": public_vec[i * n:(i + 1) * n],
                 "zero_shot": zero_shot[i]} for i in range(len(queries))]
    rows = {"zero-shot": score(args.task, zero_answers, references)}
    for name, outputs in (("few-shot", "teacher_outputs"), ("public few-shot", "public_outputs")):
        per_teacher = [score(args.task, [f[outputs][t] for f in features], references) for t in range(n)]
        rows[f"{name} ({shots}-shot, mean of teachers)"] = {k: float(np.mean([s[k] for s in per_teacher]))
                                                             for k in per_teacher[0]}
    answered: dict[str, str] = {}

    def generate(prompts: list[str]) -> list[str]:
        """Greedy answers are a function of the prompt: generate each distinct prompt once."""
        todo = sorted({p for p in prompts if p not in answered})
        answered.update(zip(todo, backend.generate(todo, greedy, progress=True) if todo else []))
        return [answered[p] for p in prompts]

    for eps in [*args.epsilons, INF]:
        suffix = "∞ (non-private aggregation)" if eps == INF else f"{eps:g}"
        for mcfg in (sga_cfg, ksa_cfg):
            method = mcfg.method.name
            with stage(f"{method}: plan"):
                plan = None if eps == INF else planning.plan_with_settings(
                    mcfg, sampling_rate=rate, queries=len(queries), epsilon=eps, delta=delta)
            with stage(f"{method}: aggregate"):
                results = [nonprivate(mcfg, f, rng) if plan is None else aggregate_as_planned(mcfg, plan, f, rng)
                           for f in features]
            with stage(f"{method}: release"):
                if method == "sga":
                    chosen = [public_candidates(r["centres"], f["public"], f["public_outputs"], mcfg.method.k)
                              for r, f in zip(results, features)]
                    top1 = [f["public_outputs"][c[0]] for c, f in zip(chosen, features)]
                    prompts = [sga_prompt(mcfg, q, [f["public_outputs"][i] for i in c], ex)
                               for (q, _), c, f, ex in zip(queries, chosen, features, examples)]
                    picked = generate([p for p in prompts if p is not None])
                    it = iter(picked)
                    topk = [t if p is None else next(it) for p, t in zip(prompts, top1)]
                    rows[f"SGA top-1 ε={suffix}"] = score(args.task, top1, references)
                    rows[f"SGA top-{mcfg.method.k} + LLM ε={suffix}"] = score(args.task, topk, references)
                    rows[f"SGA top-1 ε={suffix}"]["clusters"] = float(np.mean([len(r["counts"]) for r in results]))
                else:
                    prompts = [keyword_prompt(mcfg.task, mcfg.method.keyword_template, q, r["keywords"], example=ex)
                               for (q, _), r, ex in zip(queries, results, examples)]
                    rows[f"KSA-public ε={suffix}"] = score(args.task, generate(prompts), references)
        for label in [k for k in rows if k.endswith(f"ε={suffix}")]:
            print(f"{label}: {rows[label]}", flush=True)

    metrics = sorted({k for r in rows.values() for k in r}, key=lambda k: (k == "clusters", k))
    report(rows, metrics, args.json, {"task": args.task, "queries": len(queries), "teachers": n, "shots": shots,
                                      "sampling_rate": rate, "delta": delta})


if __name__ == "__main__":
    main()
