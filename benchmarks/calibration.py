"""Contextual calibration of the teachers' label votes (Zhao et al. 2021), measured: zero-shot, one few-shot
teacher, the non-private majority of the teachers and RNM at ε, each with and without calibration, side by side on
the same teachers (same demonstrations, same queries).

    .venv/bin/python benchmarks/calibration.py [--configs sst2-rnm agnews-rnm] [--queries 100] [--repetitions 3]
                                              [--epsilon 3] [--seed 0] [--batched] [--json]
    .venv/bin/python benchmarks/calibration.py --timing [--configs sst2-rnm] [--queries 20] [--json]

The configs' data come from the benchmark sets (docs/BENCHMARKS.md says where); the model is the configs' own
(the embedded SmolLM2-135M). Accuracy, mean and standard deviation over repetitions (fresh teachers and noise).
With --json the last line is one JSON object with `rows`: {config, calibrated, setting, accuracy, std}.

--timing: the calibrated votes of `--queries` 4-shot teacher prompts, each prompt and its content-free variants
scored as one group (the pipeline's way) against each of them alone, side by side in one process; `rows`:
{config, prompts, prompt_tokens, grouped_s, alone_s, speedup, same_votes}.
"""

from __future__ import annotations

import argparse
import json
import math
import time

import numpy as np

from dpicl.config import load_config
from dpicl.evaluation import sweep
from dpicl.inference.teachers import label_votes
from dpicl.privacy.rng import benchmark_rng, derived_seed
from dpicl.prompts import render_prompt
from dpicl.tasks import context


class _ScoreCache:
    """The backend, with each prompt's label log-probabilities computed once: a repetition's second pass reuses the
    scores of its first (one-by-one forward passes are deterministic, so the reuse changes nothing). A group of
    variants (a prompt and its content-free inputs) not wholly cached is scored as a group; the scores already
    kept stay (the group's differ from them in the last bits only)."""

    def __init__(self, backend):
        self.backend, self.cache = backend, {}

    def __getattr__(self, name):
        return getattr(self.backend, name)

    def label_logprobs(self, prompts, continuations, *, progress=False, variants=1):
        labels = tuple(continuations)
        groups = dict.fromkeys(tuple(prompts[i:i + variants]) for i in range(0, len(prompts), variants))
        todo = [p for group in groups if any((p, labels) not in self.cache for p in group) for p in group]
        if todo:
            scores = self.backend.label_logprobs(todo, continuations, progress=progress, variants=variants)
            for p, row in zip(todo, scores, strict=True):
                self.cache.setdefault((p, labels), row)
        return np.array([self.cache[(p, labels)] for p in prompts])


def accuracies(cfg, ens, epsilon: float, rng, backend) -> dict[str, float]:
    refs = ens.references
    teacher = np.mean([sweep.score(cfg, [a[t] for a in ens.answers["few-shot"]], refs, None)["accuracy"]
                       for t in range(len(ens.answers["few-shot"][0]))])
    majority, _ = sweep.method_answers(cfg, ens, sweep.INF, backend, rng)
    private, _ = sweep.method_answers(cfg, ens, epsilon, backend, rng)
    return {"zero-shot": sweep.score(cfg, ens.answers["zero-shot"], refs, None)["accuracy"],
            "one teacher (few-shot)": float(teacher),
            "teachers' majority (non-private)": sweep.score(cfg, majority[""], refs, None)["accuracy"],
            f"RNM ε={epsilon:g}": sweep.score(cfg, private[""], refs, None)["accuracy"]}


class _Alone:
    """The backend, scoring every prompt alone whatever `variants` says (the way before groups)."""

    def __init__(self, backend):
        self.backend = backend

    def label_logprobs(self, prompts, continuations, *, progress=False, variants=1):
        return self.backend.label_logprobs(prompts, continuations, progress=progress)


def timing(name: str, queries: int, seed: int) -> dict:
    cfg = load_config(name)
    cfg = cfg.model_copy(update={"task": cfg.task.model_copy(update={"calibrate": True})})
    private, _, _, rows = sweep.load_benchmark([cfg], queries)
    rng = np.random.default_rng(seed)
    texts = [q for q, _ in rows]
    prompts = [render_prompt(cfg.task, [(private[i].input, private[i].output)
                                        for i in rng.choice(len(private), cfg.method.shots, replace=False)], q)
               for q in texts]
    backend = context.backend(cfg)
    label_votes(backend, prompts[:1], cfg, texts[:1])  # warm-up
    seconds, votes = {}, {}
    for way, scorer in (("grouped", backend), ("alone", _Alone(backend))):
        started = time.perf_counter()
        votes[way] = label_votes(scorer, prompts, cfg, texts)
        seconds[way] = time.perf_counter() - started
    return {"config": name, "prompts": len(prompts), "prompt_tokens": float(np.mean(backend.count_tokens(prompts))),
            "grouped_s": seconds["grouped"], "alone_s": seconds["alone"],
            "speedup": seconds["alone"] / seconds["grouped"], "same_votes": votes["grouped"] == votes["alone"]}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--configs", nargs="+", default=["sst2-rnm", "agnews-rnm"])
    parser.add_argument("--queries", type=int, default=100)
    parser.add_argument("--repetitions", type=int, default=3)
    parser.add_argument("--epsilon", type=float, default=3.0)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--batched", action="store_true",
                        help="batched forward passes (model.batch_invariant: false): faster, votes may differ in the "
                             "last bits of a log-probability")
    parser.add_argument("--json", action="store_true")
    parser.add_argument("--timing", action="store_true", help="time grouped against one-at-a-time calibrated votes")
    args = parser.parse_args()
    if args.timing:
        rows = [timing(name, args.queries, args.seed) for name in args.configs]
        for r in rows:
            print(f"{r['config']}: {r['prompts']} calibrated votes ({r['prompt_tokens']:.0f} prompt tokens): grouped "
                  f"{r['grouped_s']:.1f} s, each prompt alone {r['alone_s']:.1f} s, {r['speedup']:.2f}x, "
                  f"same votes: {r['same_votes']}")
        if args.json:
            print(json.dumps({"rows": rows}))
        return
    rows = []
    for name in args.configs:
        plain = load_config(name)
        # the bundled configs calibrate: "plain" is the same config with calibration off
        plain = plain.model_copy(update={"task": plain.task.model_copy(update={"calibrate": False})})
        if args.batched:
            plain = plain.model_copy(update={"model": plain.model.model_copy(update={"batch_invariant": False})})
        calibrated = plain.model_copy(update={"task": plain.task.model_copy(update={"calibrate": True})})
        data = sweep.load_benchmark([plain], args.queries)
        backend = _ScoreCache(context.backend(plain))
        results: dict[tuple[bool, str], list[float]] = {}
        for repetition in range(args.repetitions):
            for cfg in (plain, calibrated):
                # the same teachers and queries with and without calibration: only the votes differ
                ens = sweep.build_ensemble([cfg], data, backend, context.encoder,
                                           benchmark_rng(args.seed, repetition, "ensemble"),
                                           teacher_key=derived_seed(args.seed, "teacher-key"))
                found = accuracies(cfg, ens, args.epsilon, benchmark_rng(args.seed, repetition, "noise"), backend)
                for setting, value in found.items():
                    results.setdefault((cfg.task.calibrate, setting), []).append(value)
        print(f"\n{name}: {args.queries} queries, {plain.method.teachers} teachers × {plain.method.shots} shots, "
              f"{args.repetitions} repetitions (accuracy, mean ± std)")
        print(f"{'setting':<34} {'plain':>15} {'calibrated':>15}")
        for setting in dict.fromkeys(s for _, s in results):
            cells = []
            for flag in (False, True):
                values = results[(flag, setting)]
                mean, std = float(np.mean(values)), float(np.std(values))
                cells.append(f"{mean:.3f} ± {std:.3f}")
                rows.append({"config": name, "calibrated": flag, "setting": setting, "accuracy": mean, "std": std})
            print(f"{setting:<34} {cells[0]:>15} {cells[1]:>15}", flush=True)
    if args.json:
        print(json.dumps({"rows": rows, "queries": args.queries, "repetitions": args.repetitions,
                          "epsilon": args.epsilon if math.isfinite(args.epsilon) else None}))


if __name__ == "__main__":
    main()
