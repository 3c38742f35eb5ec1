"""Token-level private decoding on E2E (papers 000, 002, 003): the time of one token step of each method next to
plain batched forward passes of the same sequences (KV-cached, and from scratch), and ROUGE-L at ε ∈ {1, 2, 4}
next to zero-shot and non-private few-shot.

    .venv/bin/python benchmarks/token_level.py --part timing --json
    .venv/bin/python benchmarks/token_level.py --part quality --queries 100 [--methods dps-mozo adapmixed dp-fewshot]

Settings come from the bundled configs `e2e-dps-mozo`, `e2e-adapmixed`, `e2e-dp-fewshot` (private pool: valid.txt;
queries: the first distinct meaning representations of test.txt outside the public tenth; at most 25 new tokens,
SmolLM2-135M). δ = 1/|private pool| as in paper 000; every method's budget is planned for the number of queries
run (DP few-shot: for its 4 synthetic demonstrations, after which answering is free). ROUGE-L F1 × 100 (no stemming),
the best over each query's references. Mechanism calls are exactly those of the pipeline (`dpicl.decoding`).
"""

from __future__ import annotations

import argparse
import json
import tempfile
import time
from collections import defaultdict
from pathlib import Path

import numpy as np
import torch
from paper001 import report, stage, timings  # run as a script: benchmarks/ is on sys.path

from dpicl import planning
from dpicl.config import load_config
from dpicl.decoding import adapmixed_answer, dp_fewshot_text, dps_mozo_answer
from dpicl.inference.base import GenerationParams
from dpicl.metrics import _scorer
from dpicl.privacy.mechanisms import adapmixed, dp_fewshot, dps_mozo
from dpicl.privacy.rng import make_rng
from dpicl.privacy.sampling import assign_teachers
from dpicl.prompts import render_prompt, zero_shot_prompt
from dpicl.storage import get_dataset, load_records
from dpicl.storage.db import connect
from dpicl.storage.ingest import ingest_source
from dpicl.tasks import context

CONFIGS = {"dps-mozo": "e2e-dps-mozo", "adapmixed": "e2e-adapmixed", "dp-fewshot": "e2e-dp-fewshot"}


def load(tmp: Path):
    """Private records, public records, and the queries grouped by input with all their references."""
    cfg = load_config("e2e-dps-mozo")
    con = connect(tmp / "bench.duckdb")
    for source in cfg.data:
        ingest_source(con, source)
    private = load_records(con, "e2e-private")
    public = load_records(con, "e2e-public")
    key = get_dataset(con, "e2e-private")["teacher_key"]
    refs: dict[str, list[str]] = defaultdict(list)
    for inp, ref in con.execute("SELECT input, reference FROM queries WHERE backlog = 'e2e-test' ORDER BY row_no"
                                ).fetchall():
        refs[inp].append(ref)
    con.close()
    return private, public, key, refs


def rouge_l(answers: list[str], references: list[list[str]]) -> list[float]:
    """ROUGE-L F1 × 100 of each answer, the best over its references."""
    scorer = _scorer(False)
    return [100 * max(scorer.score(r, a)["rougeL"].fmeasure for r in refs) for a, refs in zip(answers, references)]


def timing(backend, cfgs, private, key, query: str, steps: int) -> list[dict]:
    """Milliseconds per token step of each method, side by side with two plain batched forward passes of the same
    sequences: one that keeps their KV caches (plain decoding: `forward_ms`) and one from scratch (`prefill_ms`,
    what a method that draws new demonstrations for every token must pay at least)."""
    rng = make_rng()
    demos = [(r.input, r.output) for r in private]
    ids = [r.record_id for r in private]
    by_id = {r.record_id: r for r in private}
    task = cfgs["dps-mozo"].task
    zero = zero_shot_prompt(task, query)
    m_mozo, m_mix, m_few = (cfgs[k].method for k in ("dps-mozo", "adapmixed", "dp-fewshot"))
    one_shot = lambda: [render_prompt(task, [demos[int(i)]], query)  # noqa: E731
                        for i in dps_mozo.sample_demonstrations(len(demos), m_mozo.shots, rng)]
    splits = lambda: [render_prompt(task, [(by_id[r].input, by_id[r].output) for r in s], query)  # noqa: E731
                      for s in assign_teachers(ids, key, m_few.splits, m_few.shots,
                                               m_few.splits * m_few.shots / len(ids), rng)]
    members = [render_prompt(task, [(by_id[r].input, by_id[r].output) for r in part], query)
               for part in assign_teachers(ids, key, m_mix.members, m_mix.shots, 1.0, rng)]
    suffix = backend.encode_text(" The Eagle is a coffee shop in the city centre near the river with")[:steps + 1]

    def per_step(fn) -> float:
        backend.clear_token_cache()
        fn(suffix[:1])  # prefill of what stays cached, not counted
        start = time.perf_counter()
        for t in range(2, steps + 2):
            fn(suffix[:t])
        return (time.perf_counter() - start) / steps

    def mozo(s):
        private_lp = backend.next_token_logprobs(one_shot(), s, cache=False)
        public_lp = backend.next_token_logprobs([zero], s)[0]
        dps_mozo.step(public_lp, private_lp, top_k=m_mozo.top_k, beta=0.2, alpha=8, rng=rng)

    def mix(s):
        lp = backend.next_token_logprobs([*members, zero], s)
        adapmixed.step(lp[:-1], lp[-1], beta=0.01, alpha=m_mix.alpha, top_k=m_mix.top_k,
                       screen_lam=m_mix.screen_lambda, screen_sigma=m_mix.screen_sigma, threshold=m_mix.threshold,
                       rng=rng)

    def few(s):
        private_lp = backend.next_token_logprobs(splits(), s, cache=False)
        public_lp = backend.next_token_logprobs([zero], s)[0]
        dp_fewshot.step(private_lp, public_lp, top_k=m_few.top_k, mechanism="gaussian", noise_multiplier=1.0, rng=rng)

    fixed_mozo = [*one_shot(), zero]
    fixed_few = [*splits(), zero]
    rows = []
    for name, fn, sequences in (("dps-mozo", mozo, fixed_mozo), ("adapmixed", mix, [*members, zero]),
                                ("dp-fewshot", few, fixed_few)):
        method = per_step(fn)
        forward = per_step(lambda s, seqs=sequences: backend.next_token_logprobs(seqs, s))
        prefill = per_step(lambda s, seqs=sequences: backend.next_token_logprobs(seqs, s, cache=False))
        rows.append({"method": name, "sequences": len(sequences), "step_ms": 1000 * method,
                     "forward_ms": 1000 * forward, "step_ratio": method / forward, "prefill_ms": 1000 * prefill,
                     "prefill_ratio": method / prefill})
        print(f"{name}: {len(sequences)} sequences, {1000 * method:.0f} ms per token step vs {1000 * forward:.0f} ms "
              f"for one plain cached batched forward pass ({method / forward:.2f}x) and {1000 * prefill:.0f} ms for "
              f"one from scratch ({method / prefill:.2f}x)", flush=True)
    return rows


def quality(backend, cfgs, private, public, key, refs: dict[str, list[str]], n: int, epsilons, methods,
            planned: int, members: int | None, checkpoint, start: int = 0) -> dict[str, dict[str, float]]:
    """ROUGE-L of each setting on `n` queries from the `start`-th; budgets planned for `planned` queries (≥ n: a
    partial run uses the per-query parameters of the full one; parts merge by their per-query scores).
    `checkpoint(rows)` is called after every setting."""
    queries = list(refs)[start:start + n]
    references = [refs[q] for q in queries]
    rng = make_rng()
    delta = 1 / len(private)
    task, gen = cfgs["dps-mozo"].task, cfgs["dps-mozo"].generation
    demos = [(r.input, r.output) for r in private]
    ids = [r.record_id for r in private]
    by_id = {r.record_id: r for r in private}
    greedy = GenerationParams(max_new_tokens=gen.max_new_tokens, stop=tuple(gen.stop))
    rows: dict[str, dict[str, float]] = {}

    def score(name: str, answers: list[str], **extra) -> None:
        per_query = rouge_l(answers, references)
        rows[name] = {"rougeL": float(np.mean(per_query)), "queries": len(answers), **extra, "per_query": per_query}
        print(f"{name}: ROUGE-L {rows[name]['rougeL']:.2f} {extra}", flush=True)
        checkpoint(rows)

    if "baselines" in methods:
        with stage("zero-shot"):
            score("zero-shot", backend.generate([zero_shot_prompt(task, q) for q in queries], greedy))
        with stage("few-shot (non-private, 4 shots)"):
            prompts = [render_prompt(task, [demos[int(i)] for i in rng.choice(len(demos), 4, replace=False)], q)
                       for q in queries]
            score("few-shot (non-private)", backend.generate(prompts, greedy))
    for eps in epsilons:
        if "dps-mozo" in methods:
            m = cfgs["dps-mozo"].method
            p = planning.plan("dps-mozo", sampling_rate=m.shots / len(demos), queries=planned, epsilon=eps, delta=delta,
                              dataset_size=len(demos), max_new_tokens=gen.max_new_tokens, shots=m.shots)
            with stage(f"dps-mozo ε={eps:g}"):
                answers = [dps_mozo_answer(backend, zero_shot_prompt(task, q),
                                           lambda i, q=q: render_prompt(task, [demos[i]], q), len(demos),
                                           shots=m.shots, top_k=m.top_k, beta=p.beta, alpha=p.alpha,
                                           max_new_tokens=gen.max_new_tokens, stop=gen.stop, rng=rng).text
                           for q in queries]
            score(f"dps-mozo ε={eps:g}", answers, beta=p.beta, alpha=p.alpha)
        if "adapmixed" in methods:
            m = cfgs["adapmixed"].method
            m = m.model_copy(update={"members": members or m.members})
            p = planning.plan("adapmixed", sampling_rate=1.0, queries=planned, epsilon=eps, delta=delta,
                              max_new_tokens=gen.max_new_tokens, members=m.members, alpha=m.alpha)
            answers, passed = [], []
            with stage(f"adapmixed ε={eps:g}"):
                for q in queries:
                    parts = assign_teachers(ids, key, m.members, m.shots, 1.0, rng)
                    prompts = [render_prompt(task, [(by_id[r].input, by_id[r].output) for r in part], q)
                               for part in parts]
                    d = adapmixed_answer(backend, zero_shot_prompt(task, q), prompts, beta=p.beta, alpha=m.alpha,
                                         top_k=m.top_k, screen_lambda=m.screen_lambda, screen_sigma=m.screen_sigma,
                                         threshold=m.threshold, max_new_tokens=gen.max_new_tokens, stop=gen.stop,
                                         rng=rng)
                    answers.append(d.text)
                    passed.append(d.info["screens_passed"] / max(1, d.info["steps"]))
            score(f"adapmixed ε={eps:g}", answers, beta=p.beta, members=m.members,
                  screens_passed=float(np.mean(passed)))
        if "dp-fewshot" in methods:
            m = cfgs["dp-fewshot"].method
            q_rate = m.splits * m.shots / len(ids)
            p = planning.plan("dp-fewshot", sampling_rate=q_rate, queries=m.demos, epsilon=eps, delta=delta,
                              max_new_tokens=gen.max_new_tokens, splits=m.splits, mechanism=m.mechanism)
            synthetic = []
            with stage(f"dp-fewshot ε={eps:g}: {m.demos} synthetic demonstrations"):
                for x in [r.input for r in public[:m.demos]]:
                    def private_prompts(x=x):
                        return [render_prompt(task, [(by_id[r].input, by_id[r].output) for r in s], x)
                                for s in assign_teachers(ids, key, m.splits, m.shots, q_rate, rng)]
                    text = dp_fewshot_text(backend, zero_shot_prompt(task, x), private_prompts, mechanism=m.mechanism,
                                           top_k=m.top_k, noise_multiplier=p.noise_multiplier,
                                           epsilon0=p.epsilon0, max_new_tokens=gen.max_new_tokens,
                                           stop=gen.stop, rng=rng).text
                    synthetic.append((x, text))
            with stage(f"dp-fewshot ε={eps:g}: ICL with them"):
                answers = backend.generate([render_prompt(task, synthetic, q) for q in queries], greedy)
            score(f"dp-fewshot ε={eps:g}", answers, noise_multiplier=p.noise_multiplier)
    return rows


def merge(paths: list[Path], out: Path | None) -> None:
    """One table from runs in parts (other settings, or other queries of a setting): a setting's score is the mean
    over all its queries."""
    parts = [json.loads(p.read_text()) for p in paths]
    rows: dict[str, dict] = {}
    for part in parts:
        for name, row in part["rows"].items():
            merged = rows.setdefault(name, {**row, "rougeL": 0.0, "queries": 0, "per_query": []})
            total = merged["rougeL"] * merged["queries"] + row["rougeL"] * row["queries"]
            merged["queries"] += row["queries"]
            merged["rougeL"] = total / merged["queries"]
            merged["per_query"] += row.get("per_query", [])
    meta = {k: v for k, v in parts[0].items() if k not in ("rows", "timings_s")}
    meta["parts"] = [{"rows": list(p["rows"]), "timings_s": p["timings_s"], "device": p.get("device", "CPU")}
                     for p in parts]  # parts may have run on different machines
    meta["device"] = " + ".join(dict.fromkeys(part["device"] for part in meta["parts"]))
    meta.update(timing=next((p["timing"] for p in parts if "timing" in p), None))
    report(rows, ["rougeL", "queries"], out, meta)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--part", choices=["timing", "quality", "all"], default="all")
    parser.add_argument("--queries", type=int, default=100)
    parser.add_argument("--start", type=int, default=0, help="skip this many queries (to run a benchmark in parts)")
    parser.add_argument("--merge", type=Path, nargs="+", help="print the table of these JSON results together")
    parser.add_argument("--planned-queries", type=int, help="queries each budget is planned for (default --queries)")
    parser.add_argument("--members", type=int, help="adapmixed members (default: the config's)")
    parser.add_argument("--epsilons", type=float, nargs="+", default=[1.0, 2.0, 4.0])
    parser.add_argument("--methods", nargs="+", default=["baselines", "dps-mozo", "adapmixed", "dp-fewshot"])
    parser.add_argument("--timing-steps", type=int, default=8)
    parser.add_argument("--json", nargs="?", const="-", metavar="PATH",
                        help="print one JSON object as the last line (and write it to PATH when given)")
    args = parser.parse_args()
    # --json alone: one JSON object as the last line of the output; --json PATH: also written to PATH
    json_path = Path(args.json) if args.json not in (None, "-") else None
    if args.merge:
        return merge(args.merge, json_path)
    cfgs = {name: load_config(config) for name, config in CONFIGS.items()}
    backend = context.backend(cfgs["dps-mozo"])
    with tempfile.TemporaryDirectory() as tmp:
        private, public, key, refs = load(Path(tmp))
    planned = args.planned_queries or args.queries
    meta = {"private_records": len(private), "queries": args.queries, "planned_queries": planned,
            "model": cfgs["dps-mozo"].model.llm, "max_new_tokens": cfgs["dps-mozo"].generation.max_new_tokens,
            "delta": 1 / len(private), "threads": torch.get_num_threads(),
            "device": torch.cuda.get_device_name() if backend.device.type == "cuda" else "CPU"}
    rows: dict[str, dict[str, float]] = {}

    def checkpoint(partial):
        if json_path:
            json_path.write_text(json.dumps({**meta, "rows": partial, "timings_s": timings}, indent=2))

    if args.part in ("timing", "all"):
        meta["timing"] = timing(backend, cfgs, private, key, next(iter(refs)), args.timing_steps)
    if args.part == "timing":
        rows_of_timing = meta.pop("timing")
        result = {**meta, "rows": rows_of_timing}
        if json_path:
            json_path.write_text(json.dumps(result, indent=2))
    else:
        rows = quality(backend, cfgs, private, public, key, refs, args.queries, args.epsilons, args.methods,
                       planned, args.members, checkpoint, args.start)
        report(rows, ["rougeL"], json_path, meta)
        result = {**meta, "rows": rows, "timings_s": timings}
    if args.json:
        print(json.dumps(result))


if __name__ == "__main__":
    main()
