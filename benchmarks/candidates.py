"""ESA's public candidates on the hf backend: copies of one zero-shot prompt prefilled once and decoded from copies
of its KV cache, next to each copy prefilled on its own (what the backend did before), in one process.

    .venv/bin/python benchmarks/candidates.py [--queries 4] [--candidates 16] [--repeat 2] [--json]

The prompts are SAMSum test dialogues in samsum-esa's zero-shot prompt; sampled as ESA samples its candidates
(temperature 0.7, top-p 0.95, 32 new tokens, stop at a newline), micro-batches of 8, one torch thread. The best
(shortest) of `--repeat` alternating runs counts.
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

from dpicl.config import load_config
from dpicl.inference import GenerationParams, load_backend
from dpicl.prompts import zero_shot_prompt


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--queries", type=int, default=4)
    parser.add_argument("--candidates", type=int, default=16)
    parser.add_argument("--repeat", type=int, default=2)
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    cfg = load_config("samsum-esa")
    queries = next(source.path for source in cfg.data if source.kind == "queries")  # $DPICL_DATA/samsum/test.json
    rows = json.loads(Path(queries).read_text(encoding="utf-8"))[:args.queries]
    prompts = [zero_shot_prompt(cfg.task, row["dialogue"]) for row in rows]
    backend = load_backend("hf", model=cfg.model.llm, device="cpu", threads=1, batch_size=8)
    call = [p for p in prompts for _ in range(args.candidates)]
    params = GenerationParams(max_new_tokens=32, temperature=0.7, top_p=0.95, stop=("\n",), public_prompts=True)
    shared = backend._shared_prefill
    best: dict[str, float] = {}
    for _ in range(args.repeat):
        for name in ("shared prefill", "each copy prefilled"):
            # the second: the backend's path before prefills were shared (no cache handed to generate)
            backend._shared_prefill = shared if name == "shared prefill" else (lambda ids, enc: None)
            start = time.perf_counter()
            backend.generate(call, params)
            best[name] = min(best.get(name, float("inf")), time.perf_counter() - start)
    tokens = sum(backend.count_tokens(prompts)) / len(prompts)
    speedup = best["each copy prefilled"] / best["shared prefill"]
    print(f"{args.queries} dialogues ({tokens:.0f} prompt tokens on average) × {args.candidates} candidates:")
    for name, seconds in best.items():
        print(f"  {name:<20} {seconds:6.1f} s")
    print(f"  speed-up {speedup:.2f}x")
    if args.json:
        print(json.dumps({"queries": args.queries, "candidates": args.candidates, "prompt_tokens": tokens,
                          "seconds": best, "speedup": speedup}))


if __name__ == "__main__":
    main()
