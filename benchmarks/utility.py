"""Is a DP answer worth its budget? Each ensemble method at each ε next to the free baselines (zero-shot, few-shot
ICL on public data) and the non-private ceiling (4-shot ICL on the private data), as the share of the gap it
recovers:  gap_recovered = (score − zero_shot) / (non_private − zero_shot).

    .venv/bin/python benchmarks/utility.py [--groups sst2 samsum ...] [--queries 100] [--repetitions 3]
                                           [--epsilons 1 3 8] [--seed 0] [--plots docs/images] [--json]
                                           [--out docs/benchmarks/utility.json] [--record FILE | --replay FILE]

A group is configs that share one ensemble (their teachers answer once per repetition; every method aggregates
those answers, as in `dpicl evaluate`). The baselines use the group's task and model: zero-shot is the greedy
answer without demonstrations, non-private one greedy prompt with 4 random private demonstrations per query,
public few-shot the same with the query's 4 most similar public demonstrations (groups with a public dataset only:
the stronger of the free baselines); classification scores label votes, calibrated (task.calibrate) for the
non-private row. Scores (0–100): accuracy, or ROUGE-L F1.
Token-level methods (DP few-shot generation, DPS-MOZO, AdaPMixED) are measured by benchmarks/token_level.py;
`--token-level FILE...` adds the E2E rows of its --json files, one per repetition. `--configs A B [--name LABEL]`
measures configs of your own (names or YAML paths that share one ensemble) as one group; `--synthesis CONFIG` a
dp-fewshot config's synthetic demonstrations (generated at each ε as `dpicl synthesize` does), answered by synthetic
ICL.
With --json the last line is one JSON object with `rows`: {dataset, method, epsilon, metric, score, std,
zero_shot, non_private, public_few_shot, gap_recovered} (KSA-PTR adds pass_rate, the share of passed tests);
ε = "inf" is the method's aggregation without noise; gap_recovered is null where the non-private ceiling is not above
zero-shot (no gap to recover).
`--record FILE` / `--replay FILE`: the generation on another machine (a GPU), the rest here (benchmarks/offload.py).
`--out` keeps the rows in a JSON file: the (dataset, method) pairs measured replace their own rows there, the others
stay (groups may run in separate processes, one per core); the table and plots then show every dataset of the file.
`--runs FILE...` pools separate runs of one setting (each its own process and --seed, e.g. one repetition per core)
into rows over all their repetitions.
"""

from __future__ import annotations

import argparse
import functools
import json
import math
import time
from collections import defaultdict
from pathlib import Path

import numpy as np

from dpicl import methods, planning
from dpicl.config import load_config
from dpicl.embeddings.candidates import most_similar_texts
from dpicl.evaluation import sweep
from dpicl.inference import backend_options
from dpicl.inference.teachers import greedy_params, label_votes
from dpicl.privacy.rng import benchmark_rng, derived_seed
from dpicl.prompts import render_prompt, zero_shot_prompt
from dpicl.storage import get_dataset, load_records
from dpicl.storage.db import connect
from dpicl.storage.ingest import ingest_source
from dpicl.tasks import context
from dpicl.tasks.synthesize import _pools

import offload  # benchmarks/offload.py: --record / --replay

GROUPS = {
    "samsum": ["samsum-esa", "samsum-ksa-jem", "samsum-ksa-ptr"],
    "samsum-public": ["samsum-sga", "samsum-ksa-public"],
    "sst2": ["sst2-rnm"],
    "agnews": ["agnews-rnm"],
    "trec": ["trec-rnm"],
}
NONPRIVATE_SHOTS = 4


def metric_of(cfg) -> str:
    return "accuracy" if cfg.task.type == "classification" else "rougeL"


def score(cfg, answers: list[str], references: list[str]) -> float:
    return sweep.score(cfg, answers, references, [metric_of(cfg)])[metric_of(cfg)]


@functools.lru_cache(maxsize=4)
def nearest_records(encoder, queries: tuple[str, ...], inputs: tuple[str, ...]) -> list:
    """Each query's `NONPRIVATE_SHOTS` most similar inputs; the same in every repetition, so embedded once."""
    return most_similar_texts(encoder, list(queries), list(inputs), NONPRIVATE_SHOTS)


def icl_answers(cfg, backend, records, queries: list[str], rng: np.random.Generator, calibrate: bool,
                nearest: bool = False) -> list[str]:
    """Greedy answers (or label votes) of one prompt per query with `NONPRIVATE_SHOTS` random demonstrations, or
    with the query's most similar ones (`nearest`, the most similar last); no demonstrations when `records` is empty
    (zero-shot)."""
    ranked = nearest_records(context.encoder(cfg), tuple(queries), tuple(inp for inp, _ in records)) \
        if nearest and records else None
    prompts = []
    for k, query in enumerate(queries):
        if ranked is not None:
            shown = ranked[k][::-1]
        else:
            shown = rng.choice(len(records), size=min(NONPRIVATE_SHOTS, len(records)), replace=False) if records \
                else []
        prompts.append(render_prompt(cfg.task, [records[i] for i in shown], query) if records
                       else zero_shot_prompt(cfg.task, query))
    if cfg.task.type != "classification":
        return backend.generate(prompts, greedy_params(cfg), progress=True)
    task = cfg.task.model_copy(update={"calibrate": calibrate})
    votes = label_votes(backend, prompts, cfg.model_copy(update={"task": task}), queries)
    return [cfg.task.labels[v] for v in votes]


def backend_for(cfg, args):
    """The run's LLM backend: a recorder that generates nothing (--record), the real backend with the calls of an
    answers file answered from it (--replay), or the real one."""
    if args.record:
        if cfg.task.type == "classification":
            raise SystemExit(f"--record: {cfg.name} scores label log-probabilities, which are not generate calls; "
                             "run classification groups without --record")
        options = backend_options(cfg.model)
        if args.recorder is None:
            args.recorder = offload.RecordingBackend(options)
        elif args.recorder.model_options != options:
            raise SystemExit("--record: every group of one recording must use the same model settings")
        return args.recorder
    backend = context.backend(cfg)
    if args.replay:
        args.replayed.append(offload.ReplayBackend(backend, args.replay))
        return args.replayed[-1]
    return backend


def measure_group(name: str, args, config_names: list[str] | None = None) -> list[dict]:
    configs = [load_config(c) for c in config_names or GROUPS[name]]
    base = sweep.check_configs(configs)
    data = sweep.load_benchmark(configs, args.queries)
    private, public, _, rows = data
    queries, references = [q for q, _ in rows], [r for _, r in rows]
    backend = backend_for(base, args)
    private_pairs = [(r.input, r.output) for r in private]
    scores: dict[tuple[str, float], list[float]] = {}
    baselines: dict[str, list[float]] = {"zero_shot": [], "non_private": [], "public_few_shot": []}
    pass_rates: dict[tuple[str, float], list[float]] = {}
    seconds: list[float] = []
    for repetition in range(args.repetitions):
        rng = benchmark_rng(args.seed, name, repetition)
        started = time.perf_counter()
        ens = sweep.build_ensemble(configs, data, backend, context.encoder, rng,
                                   teacher_key=derived_seed(args.seed, name, "teacher-key"),
                                   progress=lambda stage, r=repetition: print(f"  {name} rep {r}: {stage}", flush=True))
        baselines["zero_shot"].append(score(base, ens.answers["zero-shot"], references))
        baselines["non_private"].append(score(base, icl_answers(base, backend, private_pairs, queries, rng,
                                                                calibrate=True), references))
        if public:
            # the stronger free baseline: the query's most similar public records (free: no private data)
            baselines["public_few_shot"].append(score(base, icl_answers(base, backend, public, queries, rng,
                                                                        calibrate=base.task.calibrate, nearest=True),
                                                      references))
        for cfg, label in zip(configs, sweep.method_labels(configs), strict=True):
            for epsilon in [*args.epsilons, sweep.INF]:
                plan = None if math.isinf(epsilon) else planning.plan_with_settings(
                    cfg, sampling_rate=ens.sampling_rate, queries=len(ens.queries), epsilon=epsilon, delta=ens.delta)
                # fresh noise on the same teachers' answers: the spread of one ensemble's releases
                for _ in range(1 if plan is None else args.noise_draws):
                    answers, passed = sweep.method_answers(cfg, ens, epsilon, backend, rng, plan=plan)
                    for suffix, texts in answers.items():
                        scores.setdefault((label + suffix, epsilon), []).append(
                            score(cfg, texts, references))
                    if passed is not None:  # KSA-PTR: the share of queries whose test passed
                        pass_rates.setdefault((label, epsilon), []).append(passed)
        seconds.append(time.perf_counter() - started)
        print(f"  {name} rep {repetition}: {seconds[-1]:.0f} s", flush=True)
    rows = table_rows(name, base, scores, baselines, len(queries), args.repetitions, seconds)
    for row in rows:
        rates = pass_rates.get((row["method"], math.inf if row["epsilon"] == "inf" else row["epsilon"]))
        if rates:
            row["pass_rate"] = float(np.mean(rates))
    return rows


def gap_recovered(score: float, zero_shot: float, non_private: float | None) -> float | None:
    """(score − zero_shot) / (non_private − zero_shot); None where the non-private ceiling is not above zero-shot:
    with no gap to recover the share would be meaningless."""
    if non_private is None or non_private <= zero_shot:
        return None
    return (score - zero_shot) / (non_private - zero_shot)


def table_rows(name: str, cfg, scores: dict[tuple[str, float], list[float]], baselines: dict[str, list[float]],
               queries: int, repetitions: int, seconds: list[float]) -> list[dict]:
    """One row per (method, ε): the mean score over repetitions (and noise draws) next to the baselines' means and
    the share of the gap it recovers; std over all of them."""
    mean = {k: float(np.mean(v)) if v else None for k, v in baselines.items()}
    return [{"dataset": name, "method": method, "epsilon": "inf" if math.isinf(eps) else eps,
             "metric": metric_of(cfg), "score": float(np.mean(v)),
             "std": float(np.std(v)) if len(v) > 1 else None,  # one release shows no spread
             **mean, "gap_recovered": gap_recovered(float(np.mean(v)), mean["zero_shot"], mean["non_private"]),
             "queries": queries, "repetitions": repetitions, "releases_averaged": len(v),
             "seconds_per_repetition": round(float(np.mean(seconds)))}
            for (method, eps), v in scores.items()]


def measure_synthesis(config_name: str, args) -> list[dict]:
    """DP few-shot generation (paper 002) writes the config's `demos` synthetic demonstrations for the first public
    inputs at each ε — the pipeline's own plan and generation (`dpicl synthesize`), one charge each — and synthetic
    ICL answers every query with them for free; beside the same baselines as an ensemble group."""
    cfg = load_config(config_name)
    method = methods.get(cfg.method.name)
    con = connect(":memory:")
    try:
        for source in cfg.data:
            ingest_source(con, source)
        private, public = load_records(con, cfg.private_dataset), load_records(con, cfg.public_dataset)
        key = get_dataset(con, cfg.private_dataset)["teacher_key"]
        rows = con.execute("SELECT input, reference FROM queries WHERE backlog = ? ORDER BY row_no LIMIT ?",
                           [cfg.backlog, args.queries]).fetchall()
    finally:
        con.close()
    queries, references = [q for q, _ in rows], [r for _, r in rows]
    backend = backend_for(cfg, args)
    pools = _pools(cfg, private)
    inputs = [r.input for r in public[:cfg.method.demos]]
    delta = sweep.default_delta(len(private))
    private_pairs, public_pairs = [(r.input, r.output) for r in private], [(r.input, r.output) for r in public]
    scores: dict[float, list[float]] = {}
    baselines: dict[str, list[float]] = {"zero_shot": [], "non_private": [], "public_few_shot": []}
    seconds: list[float] = []
    for repetition in range(args.repetitions):
        rng = benchmark_rng(args.seed, cfg.name, repetition)
        started = time.perf_counter()
        baselines["zero_shot"].append(score(cfg, icl_answers(cfg, backend, [], queries, rng, False), references))
        baselines["non_private"].append(score(cfg, icl_answers(cfg, backend, private_pairs, queries, rng, True),
                                              references))
        baselines["public_few_shot"].append(score(cfg, icl_answers(cfg, backend, public_pairs, queries, rng, False,
                                                                   nearest=True), references))
        for epsilon in args.epsilons:
            plan, _ = method.synthesis_plan(cfg, pools, epsilon, delta)
            print(f"  {cfg.name} rep {repetition} ε={epsilon:g}: {planning.for_people(plan.numbers())}", flush=True)
            demos = [method.synthesize_text(cfg, backend, plan, pools[None], key, None, x, rng) for x in inputs]
            answers = backend.generate([render_prompt(cfg.task, demos, q) for q in queries], greedy_params(cfg),
                                       progress=True)
            scores.setdefault(epsilon, []).append(score(cfg, answers, references))
        seconds.append(time.perf_counter() - started)
        print(f"  {cfg.name} rep {repetition}: {seconds[-1]:.0f} s", flush=True)
    return table_rows(args.name or cfg.name, cfg, {("synthetic-icl", e): v for e, v in scores.items()}, baselines,
                      len(queries), args.repetitions, seconds)


def figure(value: float | None) -> str:
    return "—" if value is None else f"{value:.1f}"


def plot(rows: list[dict], folder: Path) -> list[Path]:
    """One privacy–utility figure per dataset: each method's score over ε, the baselines as horizontal lines."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    paths = []
    for dataset in dict.fromkeys(r["dataset"] for r in rows):
        mine = [r for r in rows if r["dataset"] == dataset]
        fig, ax = plt.subplots(figsize=(6, 4))
        for method in dict.fromkeys(r["method"] for r in mine):
            points = sorted((r["epsilon"], r["score"], r["std"]) for r in mine
                            if r["method"] == method and r["epsilon"] != "inf")
            ax.errorbar([p[0] for p in points], [p[1] for p in points], yerr=[p[2] or 0.0 for p in points],
                        marker="o", capsize=3, label=method)
        for key, style, label in (("zero_shot", ":", "zero-shot"), ("public_few_shot", "-.", "public few-shot"),
                                  ("non_private", "--", f"non-private {NONPRIVATE_SHOTS}-shot")):
            value = next((r[key] for r in mine if r[key] is not None), None)  # runs of one dataset may differ
            if value is not None:
                ax.axhline(value, linestyle=style, color="grey", label=label)
        ax.set_xscale("log")
        ticks = sorted({r["epsilon"] for r in mine if r["epsilon"] != "inf"})
        ax.set_xticks(ticks, [f"{t:g}" for t in ticks])
        ax.minorticks_off()
        ax.set_xlabel("ε (per budget, log scale)")
        ax.set_ylabel(f"{mine[0]['metric']} (0–100)")
        reps = sorted({r["repetitions"] for r in mine})  # separate runs of one dataset may differ
        ax.set_title(f"{dataset}: {mine[0]['queries']} queries, "
                     f"{reps[0] if len(reps) == 1 else f'{reps[0]}–{reps[-1]}'} repetition(s)")
        ax.legend(fontsize="small")
        fig.tight_layout()
        path = folder / f"utility-{dataset}.png"
        fig.savefig(path, dpi=120)
        plt.close(fig)
        paths.append(path)
    return paths


def token_level_rows(paths: list[Path]) -> list[dict]:
    """benchmarks/token_level.py's E2E figures (its --json files, one per repetition: parts of one repetition are
    joined first by its --merge) as rows of this table: its non-private row is 4-shot ICL on the private data as
    here, it has no public few-shot. A setting's score is the mean over the repetitions that ran it; its `queries`
    the fewest any of them ran."""
    runs = [json.loads(Path(path).read_text())["rows"] for path in paths]
    settings: dict[str, list[dict]] = defaultdict(list)
    for run in runs:
        for name, row in run.items():
            settings[name].append(row)
    zero, ceiling = (float(np.mean([r["rougeL"] for r in settings.pop(name)]))
                     for name in ("zero-shot", "few-shot (non-private)"))
    rows = []
    for name, runs_of_it in settings.items():
        method, _, epsilon = name.partition(" ε=")
        scores = [r["rougeL"] for r in runs_of_it]
        score = float(np.mean(scores))
        rows.append({"dataset": "e2e", "method": method, "epsilon": float(epsilon), "metric": "rougeL",
                     "score": score, "std": float(np.std(scores)) if len(scores) > 1 else None,
                     "zero_shot": zero, "non_private": ceiling, "public_few_shot": None,
                     "gap_recovered": gap_recovered(score, zero, ceiling),
                     "queries": min(r["queries"] for r in runs_of_it), "repetitions": len(scores),
                     "source": ", ".join(Path(p).name for p in paths)})
    return sorted(rows, key=lambda r: (r["method"], r["epsilon"]))


def runs_in(path: Path) -> list[dict]:
    """The runs a file holds: a `{"runs": [...]}` file, one `--json` object, or a log ending with that line."""
    text = Path(path).read_text()
    try:
        data = json.loads(text)
    except json.JSONDecodeError:  # a run's log: its last line is the --json object
        data = json.loads(text.strip().splitlines()[-1])
    return data["runs"] if "runs" in data else [data]


def pooled_rows(paths: list[Path]) -> list[dict]:
    """Rows of separate runs of one setting (e.g. one repetition per process and core, each with its own --seed)
    pooled as if one run had made all their repetitions: the mean and the (population) std over every release,
    from each run's mean, std and count; the baselines averaged over the repetitions."""
    runs = [run for path in paths for run in runs_in(path)]
    groups: dict[tuple, list[tuple[dict, dict]]] = defaultdict(list)
    for run in runs:
        for row in run["rows"]:
            groups[row["dataset"], row["method"], row["epsilon"], row["metric"]].append((run, row))
    pooled = []
    for (dataset, method, epsilon, metric), parts in groups.items():
        seeds = [run["seed"] for run, _ in parts]
        if len(set(seeds)) < len(seeds):
            raise SystemExit(f"{dataset} {method} ε={epsilon}: two runs with seed {max(seeds, key=seeds.count)} "
                             "repeat the same draws; pool runs with different --seed")
        if len({row["queries"] for _, row in parts}) > 1:
            raise SystemExit(f"{dataset} {method} ε={epsilon}: the runs answered different numbers of queries; "
                             "pool runs of one --queries")
        counts = np.array([row.get("releases_averaged", row["repetitions"]) for _, row in parts], dtype=float)
        means = np.array([row["score"] for _, row in parts])
        spreads = np.array([row["std"] or 0.0 for _, row in parts])
        score = float(counts @ means / counts.sum())
        variance = float(counts @ (spreads**2 + means**2) / counts.sum() - score**2)
        reps = np.array([row["repetitions"] for _, row in parts], dtype=float)
        base = {key: None if any(row[key] is None for _, row in parts)
                else float(reps @ [row[key] for _, row in parts] / reps.sum())
                for key in ("zero_shot", "non_private", "public_few_shot")}
        row = {"dataset": dataset, "method": method, "epsilon": epsilon, "metric": metric, "score": score,
               "std": math.sqrt(max(variance, 0.0)) if counts.sum() > 1 else None, **base,
               "gap_recovered": gap_recovered(score, base["zero_shot"], base["non_private"]),
               "queries": parts[0][1]["queries"], "repetitions": int(reps.sum()),
               "releases_averaged": int(counts.sum()), "seeds": sorted(seeds),
               "source": "utility.py --runs " + " ".join(Path(p).name for p in paths)}
        if all("pass_rate" in r for _, r in parts):
            row["pass_rate"] = float(reps @ [r["pass_rate"] for _, r in parts] / reps.sum())
        if all("seconds_per_repetition" in r for _, r in parts):
            row["seconds_per_repetition"] = round(float(reps @ [r["seconds_per_repetition"] for _, r in parts]
                                                        / reps.sum()))
        pooled.append(row)
    return pooled


def merge(path: Path, rows: list[dict]) -> list[dict]:
    """Write `rows` into the JSON file at `path`, in place of the rows of their (dataset, method) pairs (the rest
    kept: a dataset's methods may be measured by separate runs); returns all its rows."""
    measured = {(r["dataset"], r["method"]) for r in rows}
    kept = json.loads(path.read_text())["rows"] if path.exists() else []
    merged = [r for r in kept if (r["dataset"], r["method"]) not in measured] + rows
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps({"rows": merged}, indent=1) + "\n")
    print(f"rows of {', '.join(sorted({f'{d} {m}' for d, m in measured}))} written to {path}")
    return merged


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--groups", nargs="+", choices=sorted(GROUPS), default=["samsum", "samsum-public", "sst2",
                                                                               "agnews"])
    parser.add_argument("--configs", nargs="+", metavar="CONFIG",
                        help="measure these configs (names or paths sharing one ensemble) as one group instead")
    parser.add_argument("--synthesis", metavar="CONFIG",
                        help="measure DP synthetic demonstrations (a dp-fewshot config) answered by synthetic ICL")
    parser.add_argument("--name", help="the dataset label of --configs' or --synthesis' rows (default: the first "
                                       "config's name)")
    parser.add_argument("--queries", type=int, default=100)
    parser.add_argument("--repetitions", type=int, default=3)
    parser.add_argument("--epsilons", type=float, nargs="+", default=[1.0, 3.0, 8.0])
    parser.add_argument("--noise-draws", type=int, default=1,
                        help="aggregate each ensemble this many times at each finite ε, with fresh noise (cheap for "
                             "ESA, RNM and SGA top-1; KSA and SGA's LLM selection generate again each time)")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--plots", type=Path, help="folder for one privacy–utility PNG per dataset")
    parser.add_argument("--json", action="store_true")
    parser.add_argument("--out", type=Path, help="a JSON file of rows to update with this run's groups")
    parser.add_argument("--token-level", type=Path, nargs="+", metavar="JSON",
                        help="add the E2E rows of benchmarks/token_level.py's --json files, one per repetition "
                             "(measures no group)")
    parser.add_argument("--runs", type=Path, nargs="+", metavar="FILE",
                        help="pool the rows of separate runs (their --json lines, logs ending with one, or a "
                             "{\"runs\": [...]} file), each with its own --seed, into rows over all their "
                             "repetitions (measures nothing)")
    parser.add_argument("--record", type=Path, metavar="FILE",
                        help="generate nothing: write every generate call whose prompts do not depend on an answer "
                             "to FILE, for benchmarks/offload.py on another machine (the printed scores are "
                             "meaningless)")
    parser.add_argument("--replay", type=Path, metavar="FILE",
                        help="answer the calls of benchmarks/offload.py's answers FILE from it (the others generate "
                             "here); the same other arguments as the --record run")
    args = parser.parse_args()
    if args.record and (args.replay or args.out):
        parser.error("--record writes calls, not scores: not with --replay or --out")
    if (args.record or args.replay) and (args.synthesis or args.token_level or args.runs):
        parser.error("--record/--replay take ensemble groups (--groups, --configs): --synthesis decodes token by "
                     "token, --token-level and --runs measure nothing")
    args.recorder, args.replayed = None, []
    if args.token_level:
        rows = token_level_rows(args.token_level)
    elif args.runs:
        rows = pooled_rows(args.runs)
    elif args.synthesis:
        rows = measure_synthesis(args.synthesis, args)
    elif args.configs:
        rows = measure_group(args.name or load_config(args.configs[0]).name, args, args.configs)
    else:
        rows = [row for name in args.groups for row in measure_group(name, args)]
    if args.recorder is not None:
        args.recorder.save(args.record)
    for replayed in args.replayed:
        print(f"replayed {replayed.hits} calls from {args.replay}; {replayed.misses} generated here", flush=True)
    table = merge(args.out, rows) if args.out else rows  # the file's rows, every dataset in it
    print("| dataset | method | ε | score ± std | zero-shot | public few-shot | non-private | gap recovered |")
    print("|---|---|---|---|---|---|---|---|")
    for r in table:
        gap = "—" if r["gap_recovered"] is None else f"{100 * r['gap_recovered']:.0f} %"
        spread = "" if r["std"] is None else f" ± {r['std']:.1f}"
        print(f"| {r['dataset']} | {r['method']} | {r['epsilon']} | {r['score']:.1f}{spread} | "
              f"{figure(r['zero_shot'])} | {figure(r['public_few_shot'])} | {figure(r['non_private'])} | {gap} |")
    if args.plots:
        args.plots.mkdir(parents=True, exist_ok=True)
        for path in plot(table, args.plots):
            print(f"plot: {path}")
    if args.json:  # pooled and token-level rows carry their own queries and repetitions
        measured = {} if args.runs or args.token_level else {"queries": args.queries,
                                                              "repetitions": args.repetitions, "seed": args.seed}
        print(json.dumps({**measured, "rows": rows}))


if __name__ == "__main__":
    main()
