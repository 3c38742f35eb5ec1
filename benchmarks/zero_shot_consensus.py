"""How much of ESA's score is free: the consensus of its public zero-shot candidates (the candidate nearest all the
others by embedding, `dpicl evaluate`'s `zero-shot consensus`) next to the greedy zero-shot answer and the mean
candidate, on the config's first queries. ESA releases one of these candidates, chosen by its private teachers;
where their consensus alone scored as high, the budget would buy nothing.

    DPICL_DATA=… .venv/bin/python benchmarks/zero_shot_consensus.py [--config samsum-esa-4shot] [--queries 100]
                                                                    [--json]

The candidates are sampled as the config's ESA run samples them (its `candidates`, temperature and top-p, the greedy
answer first), one query at a time; scores are ROUGE-L F1 (0–100) against the references.
"""

from __future__ import annotations

import argparse
import json
import time

import numpy as np

from dpicl import methods
from dpicl.config import load_config
from dpicl.embeddings.candidates import consensus
from dpicl.evaluation.sweep import load_benchmark
from dpicl.metrics import rouge
from dpicl.prompts import zero_shot_prompt
from dpicl.tasks import context


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--config", default="samsum-esa-4shot")
    parser.add_argument("--queries", type=int, default=100)
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    cfg = load_config(args.config)
    if cfg.method.name != "esa":
        raise SystemExit(f"{args.config} answers with {cfg.method.name}; this benchmark measures ESA's candidates")
    *_, rows = load_benchmark([cfg], args.queries)
    backend, encoder, esa = context.backend(cfg), context.encoder(cfg), methods.get("esa")
    greedy, chosen, mean_candidate = [], [], []
    started = time.perf_counter()
    for i, (query, reference) in enumerate(rows):
        candidates = esa.sample_candidates(cfg, backend, [zero_shot_prompt(cfg.task, query)])[0]
        greedy.append(candidates[0])
        chosen.append(candidates[consensus(encoder.encode(candidates, batched=True))])
        mean_candidate.append(rouge(candidates[1:], [reference] * (len(candidates) - 1))["rougeL"])
        print(f"  query {i + 1}/{len(rows)}: {time.perf_counter() - started:.0f} s", flush=True)
    references = [reference for _, reference in rows]
    scores = {"zero-shot (greedy)": rouge(greedy, references)["rougeL"],
              "zero-shot consensus": rouge(chosen, references)["rougeL"],
              "mean sampled candidate": float(np.mean(mean_candidate))}
    print(f"{args.config}: {len(rows)} queries, {cfg.method.candidates} sampled candidates and the greedy one each")
    for name, value in scores.items():
        print(f"  {name:24s} ROUGE-L {value:5.2f}")
    if args.json:
        print(json.dumps({"config": args.config, "queries": len(rows), "candidates": cfg.method.candidates,
                          "rougeL": scores, "seconds": round(time.perf_counter() - started)}))


if __name__ == "__main__":
    main()
