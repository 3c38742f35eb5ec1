"""Generation throughput of the `hf` and `vllm` backends side by side, on the demo workload.

The demo workload is what `dpicl demo` asked of the LLM with ESA (dpicl/configs/demo.yaml; prompts built with
`dpicl.prompts`), call by call, for `--queries` backlog queries at once (the demo's batch of queries):
- teachers: `teachers` prompts per query with `shots` private demonstrations each; greedy, the demo's
  `max_new_tokens` and stop;
- candidates: `candidates` copies of each query's zero-shot prompt, sampled (`candidate_temperature`,
  `candidate_top_p`), same length and stop.
Two more workloads explain the figures: the teacher prompts with a single new token (prefill only: the work both
backends do alike) and without the stop (`--tokens` new tokens each: decoding weighs more).

Tokens/s counts the tokens of the answers each backend returns (one tokenizer for both); the demo's headline is
the two calls together. Each workload starts with vLLM's prefix cache empty (the pipeline's prompts are new for
every query). Both backends run in this process with `--threads` CPU threads (default 1, both backends' default),
alternating, `--repeat` times; the best (shortest) run of each counts, which filters out other processes on a
shared machine.

Needs vllm (`make test-vllm` builds .venv-vllm):
`DPICL_CACHE=.cache/dpicl .venv-vllm/bin/python benchmarks/backends.py [--queries 8] [--threads 1] [--repeat 2]`.
On a GPU machine without vllm: `benchmarks/backends.py --backends hf --device cuda`. `--json`: one JSON object
with every row as the last line. `--dtype bfloat16`: both backends in bfloat16 (CPUs with BF16 instructions).
`--compile`: vLLM with torch.compile (`model.compile: true`; on CPU its start takes about 1.5 minutes more, printed).
"""

from __future__ import annotations

import argparse
import json
import random
import time
from dataclasses import dataclass

from dpicl.config import Config, load_config
from dpicl.demo.run import data_file
from dpicl.evaluation.mia.runner import method_config
from dpicl.inference import load_backend
from dpicl.inference.base import GenerationParams
from dpicl.prompts import render_prompt, zero_shot_prompt


@dataclass(frozen=True)
class Workload:
    name: str
    prompts: list[str]
    params: GenerationParams


def demo_workloads(cfg: Config, queries: int, tokens: int, seed: int = 0) -> list[Workload]:
    """ESA's generation calls in the demo for the first `queries` backlog queries, and the two explanatory ones."""
    fields = {s.kind: s.fields for s in cfg.data}

    def rows(name: str) -> list[dict]:
        return [json.loads(line) for line in data_file(name).read_text(encoding="utf-8").splitlines()]

    private, backlog = rows("private_tickets.jsonl"), rows("backlog.jsonl")[:queries]
    pf, qf = fields["private"], fields["queries"]
    method, gen = cfg.method, cfg.generation
    rng = random.Random(seed)  # benchmark mode: a fixed draw stands in for the per-query Poisson sample
    teachers = [render_prompt(cfg.task, [(r[pf.input], r[pf.output]) for r in rng.sample(private, method.shots)],
                              query[qf.input])
                for query in backlog for _ in range(method.teachers)]
    candidates = [zero_shot_prompt(cfg.task, query[qf.input]) for query in backlog for _ in range(method.candidates)]
    stop = tuple(gen.stop)
    return [
        Workload(f"teachers (greedy, {gen.max_new_tokens} tok, stop)", teachers,
                 GenerationParams(max_new_tokens=gen.max_new_tokens, stop=stop)),
        Workload(f"candidates (sampled, {gen.max_new_tokens} tok, stop)", candidates,
                 GenerationParams(max_new_tokens=gen.max_new_tokens, temperature=method.candidate_temperature,
                                  top_p=method.candidate_top_p, stop=stop)),
        Workload("teachers, prefill only (1 tok)", teachers, GenerationParams(max_new_tokens=1)),
        Workload(f"teachers, no stop (greedy, {tokens} tok)", teachers, GenerationParams(max_new_tokens=tokens)),
    ]


def measure(backend, workload: Workload) -> tuple[float, list[str]]:
    if backend.name == "vllm":
        backend.llm.reset_prefix_cache()
    start = time.perf_counter()
    outputs = backend.generate(workload.prompts, workload.params)
    return time.perf_counter() - start, outputs


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--queries", type=int, default=8, help="backlog queries at once (the demo's batch_queries)")
    parser.add_argument("--tokens", type=int, default=64, help="new tokens per prompt of the no-stop workload")
    parser.add_argument("--threads", type=int, default=1, help="CPU threads of each backend")
    parser.add_argument("--repeat", type=int, default=2, help="alternating runs per backend; the best counts")
    parser.add_argument("--device", default="cpu", help="torch device of both backends (cuda: hf on a GPU)")
    parser.add_argument("--dtype", default="float32", choices=["float32", "bfloat16"], help="of both backends")
    parser.add_argument("--compile", action="store_true", help="vllm with torch.compile (model.compile: true)")
    parser.add_argument("--json", action="store_true", help="end with one JSON object of every row")
    parser.add_argument("--backends", nargs="+", choices=["hf", "vllm"], default=["hf", "vllm"],
                        help="hf alone where vllm is not installed (the lent GPU machines)")
    args = parser.parse_args()
    demo = load_config("demo")
    # the workload the demo asked for when it answered with ESA (it uses SGA now): its teachers and candidates
    cfg = method_config(demo, "esa", teachers=demo.method.teachers, shots=demo.method.shots, candidates=6,
                        candidate_temperature=0.7, candidate_top_p=0.95)
    workloads = demo_workloads(cfg, args.queries, args.tokens)
    common = dict(model=cfg.model.llm, device=args.device, dtype=args.dtype, threads=args.threads)
    # throughput of batched inference on both sides: the batch-invariant (strict) hf path is slower by design
    extra = {"hf": dict(batch_size=cfg.model.batch_size), "vllm": dict(enforce_eager=False) if args.compile else {}}
    backends, start_s = [], {}
    for name in args.backends:
        start = time.perf_counter()
        backends.append(load_backend(name, batch_invariant=False, **extra[name], **common))
        start_s[name] = time.perf_counter() - start
    count = backends[0].count_tokens
    both = len(backends) == 2
    print(f"{args.queries} queries: {len(workloads[0].prompts)} teacher prompts ({cfg.method.teachers} per query, "
          f"{cfg.method.shots} shot, {sum(count(workloads[0].prompts))} tokens), {len(workloads[1].prompts)} "
          f"candidate prompts ({sum(count(workloads[1].prompts))} tokens); {cfg.model.llm} {args.dtype}, "
          f"{device_name(args.device)}, {args.threads} thread(s) each, hf micro-batch {cfg.model.batch_size}; "
          f"vllm {'compiled' if args.compile else 'default (eager on CPU)'}; start "
          + ", ".join(f"{name} {seconds:.0f} s" for name, seconds in start_s.items()))
    for backend in backends:  # warm-up (first-call allocations, kernels)
        backend.generate(workloads[0].prompts[:2], GenerationParams(max_new_tokens=4))
    print(f"{'workload':<40} {'backend':<6} {'best s':>7} {'runs s':>11} {'tokens':>7} {'tok/s':>7} {'vllm/hf':>8}")
    total = {b.name: [0.0, 0] for b in backends}
    rows = []
    for index, workload in enumerate(workloads):
        runs = {b.name: [] for b in backends}
        for _ in range(args.repeat):
            for backend in backends:
                runs[backend.name].append(measure(backend, workload))
        rate = {}
        for backend in backends:
            seconds, outputs = min(runs[backend.name], key=lambda run: run[0])
            tokens = sum(count(outputs))
            rate[backend.name] = tokens / seconds
            if index < 2:  # the demo's own calls
                total[backend.name][0] += seconds
                total[backend.name][1] += tokens
            rows.append({"workload": workload.name, "backend": backend.name, "seconds": seconds, "tokens": tokens,
                         "tokens_per_s": tokens / seconds})
            every = ",".join(f"{run[0]:.0f}" for run in runs[backend.name])
            ratio = f"{rate['vllm'] / rate['hf']:.2f}x" if backend.name == "vllm" and both else ""
            print(f"{workload.name:<40} {backend.name:<6} {seconds:>7.1f} {every:>11} {tokens:>7} "
                  f"{rate[backend.name]:>7.1f} {ratio:>8}")
        if workload.params.greedy and both:
            best = {name: min(r, key=lambda run: run[0])[1] for name, r in runs.items()}
            same = sum(a == b for a, b in zip(best["hf"], best["vllm"], strict=True))
            print(f"{'':<40} identical greedy answers {same}/{len(best['hf'])}")
        if index == 1:
            name = "demo workload (teachers + candidates)"
            for backend_name, (seconds, tokens) in total.items():
                ratio = f"{(tokens / seconds) / (total['hf'][1] / total['hf'][0]):.2f}x" \
                    if backend_name == "vllm" and both else ""
                print(f"{name:<40} {backend_name:<6} {seconds:>7.1f} {'':>11} {tokens:>7} {tokens / seconds:>7.1f} "
                      f"{ratio:>8}")
    for backend in backends:
        backend.close()
    if args.json:
        print(json.dumps({"device": device_name(args.device), "dtype": args.dtype, "queries": args.queries,
                          "threads": args.threads, "vllm_compiled": args.compile, "start_s": start_s, "rows": rows}))


def device_name(device: str) -> str:
    if device.startswith("cuda"):
        import torch

        return f"{torch.cuda.get_device_name(device)} (torch {torch.__version__})"
    return "CPU"


if __name__ == "__main__":
    main()
