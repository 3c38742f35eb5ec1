"""Generation cost of the `hf` backend on this machine: prompt length (shots) × threads, side by side.

Sizes ESA configs: on a 2-core CPU the teachers' prompt tokens (prefill) dominate a run. Prints one line per
setting. Run: `.venv/bin/python benchmarks/hf_generate.py [--prompts 16] [--threads 1 2]`.
"""

from __future__ import annotations

import argparse
import json
import time
from importlib import resources

from dpicl.inference.base import GenerationParams
from dpicl.inference.hf import HFBackend


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--prompts", type=int, default=16)
    parser.add_argument("--threads", type=int, nargs="+", default=[1, 2])
    parser.add_argument("--shots", type=int, nargs="+", default=[0, 2, 4])
    args = parser.parse_args()
    data = resources.files("dpicl.demo") / "data" / "private_tickets.jsonl"
    rows = [json.loads(line) for line in data.read_text(encoding="utf-8").splitlines()]

    def prompt(shots: int, i: int) -> str:
        demos = "".join(f"Ticket:\n{r['ticket']}\nSummary: {r['summary']}\n\n" for r in rows[i:i + shots])
        return f"Summarize each customer support ticket in one line.\n\n{demos}Ticket:\n{rows[200 + i]['ticket']}\nSummary:"

    print(f"{'threads':>7} {'shots':>5} {'prompt tok':>10} {'prefill s':>9} {'+32 new s':>9} {'prefill tok/s':>13}")
    for threads in args.threads:
        backend = HFBackend("smollm2", threads=threads, batch_size=args.prompts)
        for shots in args.shots:
            prompts = [prompt(shots, i) for i in range(args.prompts)]
            tokens = sum(backend.count_tokens(prompts))
            timings = []
            for new in (1, 32):
                start = time.perf_counter()
                backend.generate(prompts, GenerationParams(max_new_tokens=new, stop=("\n",)))
                timings.append(time.perf_counter() - start)
            print(f"{threads:>7} {shots:>5} {tokens:>10} {timings[0]:>9.1f} {timings[1]:>9.1f} {tokens / timings[0]:>13.0f}")
        backend.close()


if __name__ == "__main__":
    main()
