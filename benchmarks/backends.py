"""Generation throughput of the `hf` and `vllm` backends side by side, on the demo workload.

The prompts are built as `dpicl demo` builds them (dpicl/configs/demo.yaml through `dpicl.prompts`): for each
backlog query, `teachers` teacher prompts with `shots` private demonstrations each plus its zero-shot prompt;
greedy, the demo's `max_new_tokens` and stop. A second workload drops the stop (every sequence runs its full
`--tokens`), which weighs decoding more. Each workload starts with vLLM's prefix cache empty. Tokens/s counts the
tokens of the answers each backend returns (the same tokenizer for both). Both backends run in this process with
one CPU thread each (their defaults), alternating, `--repeat` times; the best (shortest) run of each counts, which
filters out the interference of other processes on a shared machine.

Needs vllm (`make test-vllm` builds .venv-vllm):
`DPICL_CACHE=.cache/dpicl .venv-vllm/bin/python benchmarks/backends.py [--queries 8] [--tokens 64] [--repeat 3]`.
"""

from __future__ import annotations

import argparse
import json
import random
import time

from dpicl.config import load_config
from dpicl.demo.run import data_file
from dpicl.inference import load_backend
from dpicl.inference.base import GenerationParams
from dpicl.prompts import render_prompt, zero_shot_prompt


def demo_prompts(queries: int, seed: int = 0) -> list[str]:
    """Teacher and zero-shot prompts of the first `queries` backlog queries, as the demo's ESA run builds them."""
    cfg = load_config("demo")
    fields = {s.kind: s.fields for s in cfg.data}

    def rows(name: str, kind: str) -> list[dict]:
        return [json.loads(line) for line in data_file(name).read_text(encoding="utf-8").splitlines()]

    private = rows("private_tickets.jsonl", "private")
    backlog = rows("backlog.jsonl", "queries")[:queries]
    pf, qf = fields["private"], fields["queries"]
    rng = random.Random(seed)  # benchmark mode: a fixed draw stands in for the per-query Poisson sample
    prompts = []
    for query in backlog:
        for _ in range(cfg.method.teachers):
            demos = [(r[pf.input], r[pf.output]) for r in rng.sample(private, cfg.method.shots)]
            prompts.append(render_prompt(cfg.task, demos, query[qf.input]))
        prompts.append(zero_shot_prompt(cfg.task, query[qf.input]))
    return prompts


def measure(backend, prompts: list[str], params: GenerationParams, count) -> tuple[float, int, list[str]]:
    if backend.name == "vllm":
        # Every workload starts cold: prompts kept from an earlier workload would skip their prefill (the pipeline's
        # teacher prompts are new for every query).
        backend.llm.reset_prefix_cache()
    start = time.perf_counter()
    outputs = backend.generate(prompts, params)
    seconds = time.perf_counter() - start
    return seconds, sum(count(outputs)), outputs


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--queries", type=int, default=8, help="backlog queries (prompts: queries x (teachers+1))")
    parser.add_argument("--tokens", type=int, default=64, help="new tokens per prompt of the no-stop workload")
    parser.add_argument("--batch-size", type=int, default=16, help="hf micro-batch size (the demo's)")
    parser.add_argument("--repeat", type=int, default=3, help="alternating runs per backend; the best counts")
    args = parser.parse_args()
    cfg = load_config("demo")
    prompts = demo_prompts(args.queries)
    workloads = {
        f"demo (greedy, {cfg.generation.max_new_tokens} tok, stop)": GenerationParams(
            max_new_tokens=cfg.generation.max_new_tokens, stop=tuple(cfg.generation.stop)),
        f"no stop (greedy, {args.tokens} tok)": GenerationParams(max_new_tokens=args.tokens),
    }
    hf = load_backend("hf", model=cfg.model.llm, device="cpu", dtype="float32", threads=1, batch_size=args.batch_size)
    vllm = load_backend("vllm", model=cfg.model.llm, device="cpu", dtype="float32")
    count = hf.count_tokens
    print(f"{len(prompts)} prompts ({args.queries} queries x {cfg.method.teachers} teachers x {cfg.method.shots} "
          f"shots + zero-shot), {sum(count(prompts))} prompt tokens; SmolLM2-135M fp32, CPU, 1 thread each")
    for backend in (hf, vllm):  # warm-up (first-call allocations, kernels)
        backend.generate(prompts[:2], GenerationParams(max_new_tokens=4))
    print(f"{'workload':<32} {'backend':<6} {'best s':>7} {'runs s':>17} {'tokens':>7} {'tok/s':>7} {'prompts/s':>9}")
    for name, params in workloads.items():
        runs: dict[str, list[tuple[float, int, list[str]]]] = {"hf": [], "vllm": []}
        for _ in range(args.repeat):
            for backend in (hf, vllm):
                runs[backend.name].append(measure(backend, prompts, params, count))
        best = {}
        for backend in (hf, vllm):
            seconds, tokens, outputs = min(runs[backend.name], key=lambda run: run[0])
            best[backend.name] = (seconds, tokens, outputs)
            every = ",".join(f"{run[0]:.0f}" for run in runs[backend.name])
            print(f"{name:<32} {backend.name:<6} {seconds:>7.1f} {every:>17} {tokens:>7} {tokens / seconds:>7.1f} "
                  f"{len(prompts) / seconds:>9.2f}")
        (hs, ht, ho), (vs, vt, vo) = best["hf"], best["vllm"]
        same = sum(a == b for a, b in zip(ho, vo, strict=True))
        print(f"{name:<32} vllm/hf throughput ratio {(vt / vs) / (ht / hs):.2f}x; identical answers {same}/{len(ho)}")
    vllm.close()
    hf.close()


if __name__ == "__main__":
    main()
