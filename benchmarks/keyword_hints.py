"""Does the model use keyword hints at all? KSA's ceiling, measured with the best keywords there are.

KSA (ksa-jem, ksa-ptr, ksa-public) releases DP keywords and asks the LLM for an answer with them as hints. Whatever
the mechanism picks, the answer can be no better than what the LLM makes of the best keywords: here, the first k
keywords of each query's reference that occur in the query itself (KSA's public domain), given to each keyword
prompt, side by side with the zero-shot prompt, on the same queries and model. No privacy is involved (the
references are the benchmark's); what it measures is the model and the prompt.

    .venv/bin/python benchmarks/keyword_hints.py [--config samsum-ksa-jem] [--llms smollm2 gemma-3-270m]
                                                 [--queries 50] [--k 10] [--json]

Prompts: `zero-shot` (the task's query prompt, no keywords), `task` (the task's query prompt with a "Keywords:"
line before its answer cue, dpicl's default keyword prompt) and `paper` (paper 001's joint-EM template, "...
with the following word suggestions ranked by their frequency from high to low: [...]"). Greedy, the config's
generation settings. A model that copies the list scores well against the reference it came from, so the row
`keywords` scores the list itself as the answer, and `echoed` is the share of answers that are the list. With
--json the last line is one JSON object with `rows`: {llm, prompt, queries, k, <the config's metrics>, echoed,
seconds}.
"""

from __future__ import annotations

import argparse
import json
import time

from dpicl.config import load_config
from dpicl.evaluation import sweep
from dpicl.inference import backend_options, load_backend
from dpicl.inference.base import GenerationParams
from dpicl.keywords import keywords, words
from dpicl.prompts import keyword_prompt, zero_shot_prompt

PAPER_TEMPLATE = ("Dialogue:\n{input}\nSummarize the above dialogue with the following word suggestions ranked by "
                  "their frequency from high to low: [{keywords}]\nThe summary is:")


def oracle_keywords(query: str, reference: str, k: int) -> list[str]:
    """The reference's first k keywords that are words of the query (KSA draws its keywords from the query's)."""
    domain = {w.lower() for w in words(query)}
    return [w for w in keywords(reference) if w.lower() in domain][:k]


def echoed(answer: str, hints: list[str]) -> bool:
    return answer.strip().strip("[]").replace(",", " ").split() == " ".join(hints).split()


def prompts(cfg, rows, hints: list[list[str]]) -> dict[str, list[str]]:
    return {
        "zero-shot": [zero_shot_prompt(cfg.task, q) for q, _ in rows],
        "task": [keyword_prompt(cfg.task, None, q, kw) for (q, _), kw in zip(rows, hints, strict=True)],
        "paper": [keyword_prompt(cfg.task, PAPER_TEMPLATE, q, kw) for (q, _), kw in zip(rows, hints, strict=True)],
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--config", default="samsum-ksa-jem",
                        help="a dialogue-summary config like SAMSum's (paper 001's template is written for dialogues)")
    parser.add_argument("--llms", nargs="+", default=["smollm2", "gemma-3-270m"])
    parser.add_argument("--queries", type=int, default=50)
    parser.add_argument("--k", type=int, default=10)
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    cfg = load_config(args.config)
    _, _, _, rows = sweep.load_benchmark([cfg], args.queries)
    references = [ref for _, ref in rows]
    gen = cfg.generation
    # every prompt here is a benchmark's, none is released: the backend may batch them (`public_prompts`)
    params = GenerationParams(max_new_tokens=gen.max_new_tokens, temperature=0.0, stop=tuple(gen.stop),
                              public_prompts=True)
    hints = [oracle_keywords(q, ref, args.k) for q, ref in rows]
    lists = [", ".join(h) for h in hints]
    results = [{"llm": "(none)", "prompt": "keywords", "queries": len(rows), "k": args.k,
                **{m: round(v, 2) for m, v in sweep.score(cfg, lists, references, None).items()}, "echoed": 1.0,
                "seconds": 0.0}]
    for llm in args.llms:
        options = {**backend_options(cfg.model), "model": llm}
        backend = load_backend(cfg.model.backend, **options)
        try:
            for name, batch in prompts(cfg, rows, hints).items():
                start = time.perf_counter()
                answers = backend.generate(batch, params, progress=True)
                scores = sweep.score(cfg, answers, references, None)
                results.append({"llm": llm, "prompt": name, "queries": len(rows), "k": args.k,
                                **{m: round(v, 2) for m, v in scores.items()},
                                "echoed": sum(map(echoed, answers, hints)) / len(rows),
                                "seconds": round(time.perf_counter() - start, 1)})
                print(" | ".join(f"{key} {value}" for key, value in results[-1].items()), flush=True)
        finally:
            backend.close()
    metrics = list(sweep.default_metrics(cfg))
    print("\n| llm | prompt | " + " | ".join(metrics) + " | echoed |\n|---|---|" + "---|" * (len(metrics) + 1))
    for r in results:
        print(f"| {r['llm']} | {r['prompt']} | " + " | ".join(f"{r[m]:.1f}" for m in metrics)
              + f" | {100 * r['echoed']:.0f} % |")
    if args.json:
        print(json.dumps({"rows": results}))


if __name__ == "__main__":
    main()
