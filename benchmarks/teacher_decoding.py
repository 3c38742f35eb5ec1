"""The price of batch invariance on the demo's teacher call, and what decoding in groups (`model.decode_rows`) wins.

The workload is the demo's private teacher call (dpicl/configs/demo.yaml: `teachers` one-shot prompts per query,
greedy, the demo's `max_new_tokens` and stop) for `--queries` backlog queries, run three ways by the `hf` backend
in this process, alternating, `--repeat` times (the best run of each counts, which filters out other processes on
a shared machine):
- one at a time: every prompt alone in its forward passes (`decode_rows: 1`, the default);
- in groups: prompts prefilled alone, then decoded `--rows` at a time with the rows kept apart (`decode_rows`);
- batched: `batch_invariant: false` (padded micro-batches of `batch_size`): the speed the guarantee costs.

`--public`: the demo's public teacher call instead (each query's `teachers` one-shot prompts showing its most similar
public tickets), two ways: in padded micro-batches of the demo's `batch_size` (`decode_rows: 1`), and in groups of
`--rows` with each beginning the prompts share prefilled once and finished rows shed (`prefix_tree`).

`.venv/bin/python benchmarks/teacher_decoding.py [--queries 4] [--rows 10] [--parallel 1] [--dtype float32]
[--repeat 2] [--public] [--json]`
"""

from __future__ import annotations

import argparse
import json
import time
from dataclasses import replace

from backends import demo_workloads

from dpicl.config import load_config
from dpicl.demo.run import data_file
from dpicl.embeddings.candidates import most_similar
from dpicl.embeddings.encoder import Encoder
from dpicl.prompts import public_ensemble
from dpicl.evaluation.mia.runner import method_config
from dpicl.inference import load_backend


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--queries", type=int, default=4, help="backlog queries whose teacher prompts form the call")
    parser.add_argument("--rows", type=int, default=10, help="decode_rows of the grouped path")
    parser.add_argument("--parallel", type=int, default=1, help="parallel_prompts of the strict and grouped paths")
    parser.add_argument("--repeat", type=int, default=2, help="alternating runs per path; the best counts")
    parser.add_argument("--dtype", default="float32", choices=["float32", "bfloat16"],
                        help="of the model (bfloat16: the demo's, for CPUs with BF16 instructions)")
    parser.add_argument("--public", action="store_true", help="the demo's public teacher call instead")
    parser.add_argument("--json", action="store_true", help="print one JSON object as the last line")
    args = parser.parse_args()
    demo = load_config("demo")
    # the demo's private teachers (demo_workloads builds ESA's calls: its first is the teachers', as in SGA)
    cfg = method_config(demo, "esa", teachers=demo.method.teachers, shots=demo.method.shots, candidates=1)
    teachers = demo_workloads(cfg, args.queries, tokens=1)[0]
    prompts, params = teachers.prompts, teachers.params
    common = dict(model=cfg.model.llm, device="cpu", dtype=args.dtype, threads=1, parallel_prompts=args.parallel)
    if args.public:
        prompts, params = public_teacher_prompts(demo, args.queries), replace(params, public_prompts=True)
        paths = {
            f"padded batches of {demo.model.batch_size}": load_backend("hf", batch_size=demo.model.batch_size,
                                                                       **common),
            f"groups of {args.rows}, shared": load_backend("hf", decode_rows=args.rows, **common),
        }
    else:
        paths = {
            "one at a time": load_backend("hf", **common),
            f"groups of {args.rows}": load_backend("hf", decode_rows=args.rows, **common),
            "batched (not invariant)": load_backend("hf", batch_invariant=False, batch_size=cfg.model.batch_size,
                                                    **{**common, "parallel_prompts": 1}),
        }
    first = next(iter(paths))  # the reference the others are compared with
    tokens = sum(paths[first].count_tokens(prompts))
    print(f"{args.queries} queries: {len(prompts)} {'public ' if args.public else ''}teacher prompts, {tokens} prompt "
          f"tokens, {params.max_new_tokens} new tokens at most, stop {list(params.stop)}; {cfg.model.llm} "
          f"{args.dtype}, CPU, 1 thread, parallel_prompts {args.parallel}")
    for backend in paths.values():  # warm-up (first-call allocations)
        backend.generate(prompts[:2], params)
    runs: dict[str, list[tuple[float, list[str]]]] = {name: [] for name in paths}
    for _ in range(args.repeat):
        for name, backend in paths.items():
            start = time.perf_counter()
            outputs = backend.generate(prompts, params)
            runs[name].append((time.perf_counter() - start, outputs))
    base, reference = min(runs[first], key=lambda run: run[0])
    rows = []
    print(f"{'path':<26} {'best s':>7} {'runs s':>13} {'speed-up':>9} {'answers as the first':>25}")
    for name, measured in runs.items():
        seconds, outputs = min(measured, key=lambda run: run[0])
        same = sum(a == b for a, b in zip(outputs, reference, strict=True))
        every = ",".join(f"{s:.0f}" for s, _ in measured)
        print(f"{name:<26} {seconds:>7.1f} {every:>13} {base / seconds:>8.2f}x {same:>20}/{len(reference)}")
        rows.append({"path": name, "seconds": round(seconds, 2), "runs": [round(s, 2) for s, _ in measured],
                     "speedup": round(base / seconds, 3), "same_answers": same, "prompts": len(reference)})
    for backend in paths.values():
        backend.close()
    if args.json:
        print(json.dumps({"queries": args.queries, "rows": args.rows, "parallel": args.parallel, "dtype": args.dtype,
                          "public": args.public, "prompt_tokens": tokens, "paths": rows}))


def public_teacher_prompts(demo, queries: int) -> list[str]:
    """The demo's public teachers' prompts for its first `queries` backlog queries (`public_demonstrations: nearest`:
    each teacher shows one of the query's most similar public tickets, as the pipeline's prompt stage does)."""
    fields = {s.kind: s.fields for s in demo.data}
    pf, qf = fields["public"], fields["queries"]
    public = [json.loads(line) for line in data_file("public_tickets.jsonl").read_text(encoding="utf-8").splitlines()]
    backlog = [json.loads(line) for line in data_file("backlog.jsonl").read_text(encoding="utf-8").splitlines()]
    backlog = [row[qf.input] for row in backlog[:queries]]
    encoder = Encoder(demo.embedding.model)
    ranked = most_similar(encoder.encode(backlog, batched=True),
                          encoder.encode([row[pf.input] for row in public], batched=True),
                          demo.method.teachers * demo.method.public_shot_count)
    demonstrations = [(row[pf.input], row[pf.output]) for row in public]
    return [prompt for query, row in zip(backlog, ranked)
            for prompt in public_ensemble(demo.task, demonstrations, query, demo.method.teachers,
                                          demo.method.public_shot_count, "", row.tolist())[0]]


if __name__ == "__main__":
    main()
