"""The price of batch invariance on the demo's teacher call, and what decoding in groups (`model.decode_rows`) wins.

The workload is the demo's private teacher call (dpicl/configs/demo.yaml: `teachers` one-shot prompts per query,
greedy, the demo's `max_new_tokens` and stop) for `--queries` backlog queries, run three ways by the `hf` backend
in this process, alternating, `--repeat` times (the best run of each counts, which filters out other processes on
a shared machine):
- one at a time: every prompt alone in its forward passes (`decode_rows: 1`, the default);
- in groups: prompts prefilled alone, then decoded `--rows` at a time with the rows kept apart (`decode_rows`);
- batched: `batch_invariant: false` (padded micro-batches of `batch_size`): the speed the guarantee costs.

`.venv/bin/python benchmarks/teacher_decoding.py [--queries 4] [--rows 10] [--parallel 1] [--dtype float32]
[--repeat 2] [--json]`
"""

from __future__ import annotations

import argparse
import json
import time

from backends import demo_workloads

from dpicl.config import load_config
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
    parser.add_argument("--json", action="store_true", help="print one JSON object as the last line")
    args = parser.parse_args()
    demo = load_config("demo")
    # the demo's private teachers (demo_workloads builds ESA's calls: its first is the teachers', as in SGA)
    cfg = method_config(demo, "esa", teachers=demo.method.teachers, shots=demo.method.shots, candidates=1)
    teachers = demo_workloads(cfg, args.queries, tokens=1)[0]
    common = dict(model=cfg.model.llm, device="cpu", dtype=args.dtype, threads=1)
    paths = {
        "one at a time": load_backend("hf", parallel_prompts=args.parallel, **common),
        f"groups of {args.rows}": load_backend("hf", parallel_prompts=args.parallel, decode_rows=args.rows, **common),
        "batched (not invariant)": load_backend("hf", batch_invariant=False, batch_size=cfg.model.batch_size,
                                                **common),
    }
    strict = paths["one at a time"]
    tokens = sum(strict.count_tokens(teachers.prompts))
    print(f"{args.queries} queries: {len(teachers.prompts)} teacher prompts, {tokens} prompt tokens, "
          f"{teachers.params.max_new_tokens} new tokens at most, stop {list(teachers.params.stop)}; {cfg.model.llm} "
          f"{args.dtype}, CPU, 1 thread, parallel_prompts {args.parallel}")
    for backend in paths.values():  # warm-up (first-call allocations)
        backend.generate(teachers.prompts[:2], teachers.params)
    runs: dict[str, list[tuple[float, list[str]]]] = {name: [] for name in paths}
    for _ in range(args.repeat):
        for name, backend in paths.items():
            start = time.perf_counter()
            outputs = backend.generate(teachers.prompts, teachers.params)
            runs[name].append((time.perf_counter() - start, outputs))
    base, reference = min(runs["one at a time"], key=lambda run: run[0])
    rows = []
    print(f"{'path':<26} {'best s':>7} {'runs s':>13} {'speed-up':>9} {'answers as one at a time':>25}")
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
                          "prompt_tokens": tokens, "paths": rows}))


if __name__ == "__main__":
    main()
