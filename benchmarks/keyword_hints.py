"""Does the model use keyword hints at all? KSA's ceiling, measured with the best keywords there are.

KSA (ksa-jem, ksa-ptr, ksa-public) releases DP keywords and asks the LLM for an answer with them as hints. Whatever
the mechanism picks, the answer can be no better than what the LLM makes of the best keywords: here, the first k
keywords of each query's reference that occur in the query itself (KSA's public domain), given to each keyword
prompt, side by side with the zero-shot prompt, on the same queries and model. No privacy is involved (the
references are the benchmark's); what it measures is the model and the prompt.

With --teacher-hints the same prompts also get the keywords KSA would release without noise: each query's
teachers (the config's teachers × shots, drawn from its private set as a sweep draws them, answered by the same
LLM) and the k words of the query's zero-shot prompt they name most (ksa-jem at ε = ∞: when fewer than k words are
named, the rest follow in the prompt's order), and once only the words a teacher named. Their `precision` and
`recall` against the reference's keywords above say whether the teachers' keywords or the model's use of them
holds KSA back; the row `few-shot` scores the teachers' own answers.

    .venv/bin/python benchmarks/keyword_hints.py [--config samsum-ksa-jem] [--llms smollm2 gemma-3-270m]
                                                 [--queries 50] [--k 10] [--teacher-hints] [--json]
    .venv/bin/python benchmarks/keyword_hints.py --config samsum-ksa-public --public-fewshot 4 [--epsilons 3]
                                                 [--repetitions 2] [--planned-queries 100] ...

With --public-fewshot N (a ksa-public config; its public teachers then show the query's nearest public records)
the keywords are KSA-public's own, without noise (`ε = ∞`) and at each ε of --epsilons (fresh noise per
repetition, planned for --planned-queries), each given to three prompts that show public examples first: the
public one-shot example (`one-shot`, ksa-public without `public_fewshot`), the N nearest public records as the
free N-shot prompt shows them (`N-shot`), and the same records each with a Keywords line of its own output
(`N-shot annotated`, ksa-public's prompt with `public_fewshot: N`); the row `public N-shot` is the free answer.

Prompts: `zero-shot` (the task's query prompt, no keywords), `task` (the task's query prompt with a "Keywords:"
line before its answer cue, dpicl's default keyword prompt) and `paper` (paper 001's joint-EM template, "...
with the following word suggestions ranked by their frequency from high to low: [...]"). Greedy, the config's
generation settings. A model that copies the list scores well against the reference it came from, so the row
`keywords` scores the list itself as the answer, and `echoed` is the share of answers that are the list. With
--json the last line is one JSON object with `rows`: {llm, hints, prompt, queries, k, <the config's metrics>,
echoed, precision, recall, seconds}.
"""

from __future__ import annotations

import argparse
import json
import time

import numpy as np

from dpicl import planning
from dpicl.config import load_config
from dpicl.evaluation import sweep
from dpicl.inference import backend_options, load_backend
from dpicl.inference.base import GenerationParams
from dpicl.keywords import keywords, words
from dpicl.methods.base import aggregate_as_planned
from dpicl.methods.ksa_jem import top_keywords
from dpicl.prompts import keyword_demonstrations, keyword_prompt, zero_shot_prompt
from dpicl.tasks import context

PAPER_TEMPLATE = ("Dialogue:\n{input}\nSummarize the above dialogue with the following word suggestions ranked by "
                  "their frequency from high to low: [{keywords}]\nThe summary is:")


def oracle_keywords(query: str, reference: str, k: int) -> list[str]:
    """The reference's first k keywords that are words of the query (KSA draws its keywords from the query's)."""
    domain = {w.lower() for w in words(query)}
    return [w for w in keywords(reference) if w.lower() in domain][:k]


def teacher_keywords(cfg, ensemble) -> tuple[list[list[str]], list[list[str]]]:
    """Per query: ksa-jem's noise-free keywords from the teachers' answers, and those of them a teacher named."""
    ranked, named = [], []
    for f in ensemble.features:
        outputs = f["teacher_outputs"]
        best = top_keywords(cfg, keywords(f["zero_shot"]), outputs)["keywords"]
        said = set().union(*(keywords(t) for t in outputs))
        ranked.append(best)
        named.append([w for w in best if w in said])
    return ranked, named


def overlap(hints: list[list[str]], oracle: list[list[str]]) -> dict[str, float]:
    """Mean share of the hints that are reference keywords (precision) and of those found (recall)."""
    pairs = [({w.lower() for w in h}, {w.lower() for w in o}) for h, o in zip(hints, oracle, strict=True)]
    return {"precision": round(float(np.mean([len(h & o) / len(h) if h else 0.0 for h, o in pairs])), 3),
            "recall": round(float(np.mean([len(h & o) / len(o) if o else 1.0 for h, o in pairs])), 3)}


def echoed(answer: str, hints: list[str]) -> bool:
    return answer.strip().strip("[]").replace(",", " ").split() == " ".join(hints).split()


def prompts(cfg, rows, hints: list[list[str]]) -> dict[str, list[str]]:
    return {
        "task": [keyword_prompt(cfg.task, None, q, kw) for (q, _), kw in zip(rows, hints, strict=True)],
        "paper": [keyword_prompt(cfg.task, PAPER_TEMPLATE, q, kw) for (q, _), kw in zip(rows, hints, strict=True)],
    }


def ksa_public_keywords(cfg, ensemble, args) -> dict[str, list[list[str]]]:
    """KSA-public's keywords per query: without noise, then at each ε (one fresh draw per repetition)."""
    rng = np.random.default_rng(1)
    sets = {"ksa-public ε = ∞": [sweep.nonprivate(cfg, f, rng)["keywords"] for f in ensemble.features]}
    for epsilon in args.epsilons:
        plan = planning.plan_with_settings(cfg, sampling_rate=ensemble.sampling_rate, queries=args.planned_queries,
                                           epsilon=epsilon, delta=ensemble.delta)
        for rep in range(args.repetitions):
            sets[f"ksa-public ε = {epsilon:g}, repetition {rep}"] = [
                aggregate_as_planned(cfg, plan, f, rng)["keywords"] for f in ensemble.features]
    return sets


def public_example_prompts(cfg, rows, hints, ensemble, shots: int) -> dict[str, list[str]]:
    """The keyword prompt after the public one-shot example, after the `shots` nearest public records, and after
    those records with their own keywords (what ksa-public releases with `public_fewshot`)."""
    task, out = cfg.task, {"one-shot": [], f"{shots}-shot": [], f"{shots}-shot annotated": []}
    for (query, _), kw, f in zip(rows, hints, ensemble.features, strict=True):
        plain = task.separator.join(task.demo_template.format(input=i, output=o) for i, o in f["public_demos"])
        for name, example in zip(out, [f["public_example"], plain,
                                       keyword_demonstrations(task, f["public_demos"], cfg.method.k)]):
            out[name].append(keyword_prompt(task, None, query, kw, example=example))
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--config", default="samsum-ksa-jem",
                        help="a dialogue-summary config like SAMSum's (paper 001's template is written for dialogues)")
    parser.add_argument("--llms", nargs="+", default=["smollm2", "gemma-3-270m"])
    parser.add_argument("--queries", type=int, default=50)
    parser.add_argument("--k", type=int, default=10)
    parser.add_argument("--teacher-hints", action="store_true",
                        help="also the keywords of the config's teachers (ksa-jem at ε = ∞), generated by each LLM")
    parser.add_argument("--public-fewshot", type=int, metavar="N",
                        help="KSA-public's keywords after N public examples, with and without their own keywords")
    parser.add_argument("--epsilons", type=float, nargs="*", default=[3.0])
    parser.add_argument("--repetitions", type=int, default=2)
    parser.add_argument("--planned-queries", type=int, default=100)
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    cfg = load_config(args.config)
    if args.public_fewshot:
        if cfg.method.name != "ksa-public":
            parser.error(f"--public-fewshot needs a ksa-public config; {args.config!r} runs {cfg.method.name}")
        method = cfg.method.model_copy(update={"public_demonstrations": "nearest",
                                               "public_fewshot": args.public_fewshot})
        cfg = cfg.model_copy(update={"method": method})
    data = sweep.load_benchmark([cfg], args.queries)
    rows = data[3]
    references = [ref for _, ref in rows]
    gen = cfg.generation
    # every prompt here is a benchmark's, none is released: the backend may batch them (`public_prompts`)
    params = GenerationParams(max_new_tokens=gen.max_new_tokens, temperature=0.0, stop=tuple(gen.stop),
                              public_prompts=True)
    oracle = [oracle_keywords(q, ref, args.k) for q, ref in rows]

    def row(llm, hints, prompt, answers, chosen=None, seconds=0.0, refs=references):
        """A scored row; `chosen`: the keywords the prompt showed (None: none), `refs`: one per answer."""
        scores = sweep.score(cfg, answers, refs, None)
        return {"llm": llm, "hints": hints, "prompt": prompt, "queries": len(rows), "k": args.k,
                **{m: round(v, 2) for m, v in scores.items()},
                "echoed": sum(map(echoed, answers, chosen)) / len(rows) if chosen else 0.0,
                **(overlap(chosen, oracle) if chosen else {"precision": None, "recall": None}),
                "seconds": round(seconds, 1)}

    lists = lambda hints: [", ".join(h) for h in hints]  # noqa: E731  (the list itself as the answer)
    results = [row("(none)", "reference", "keywords", lists(oracle), oracle)]
    for llm in args.llms:
        options = {**backend_options(cfg.model), "model": llm}
        backend = load_backend(cfg.model.backend, **options)
        try:
            start = time.perf_counter()
            answers = backend.generate([zero_shot_prompt(cfg.task, q) for q, _ in rows], params, progress=True)
            results.append(row(llm, "(none)", "zero-shot", answers, seconds=time.perf_counter() - start))
            hint_sets = {"reference": oracle}
            if args.teacher_hints:
                start = time.perf_counter()
                ensemble = sweep.build_ensemble([cfg], data, backend, lambda c: None, np.random.default_rng(0),
                                                teacher_key=b"keyword-hints")
                label = f"teachers {cfg.method.teachers}x{cfg.method.shots}"
                ranked, named = teacher_keywords(cfg, ensemble)
                hint_sets |= {label: ranked, f"{label}, named only": named}
                teams = ensemble.answers["few-shot"]  # per query, its teachers' answers: each scored
                results.append(row(llm, label, "few-shot", [a for team in teams for a in team], None,
                                   time.perf_counter() - start, [r for r, t in zip(references, teams) for _ in t]))
                results += [row(llm, name, "keywords", lists(h), h) for name, h in hint_sets.items()
                            if name != "reference"]
            if args.public_fewshot:
                start = time.perf_counter()
                ensemble = sweep.build_ensemble([cfg], data, backend, context.encoder, np.random.default_rng(0),
                                                teacher_key=b"keyword-hints")
                free = ensemble.answers[f"public {args.public_fewshot}-shot"]
                results.append(row(llm, "(none)", f"public {args.public_fewshot}-shot", free,
                                   seconds=time.perf_counter() - start))
                hint_sets = ksa_public_keywords(cfg, ensemble, args)
                results += [row(llm, name, "keywords", lists(h), h) for name, h in hint_sets.items()]
            for hints, chosen in hint_sets.items():
                batches = (public_example_prompts(cfg, rows, chosen, ensemble, args.public_fewshot)
                           if args.public_fewshot else prompts(cfg, rows, chosen))
                for name, batch in batches.items():
                    start = time.perf_counter()
                    answers = backend.generate(batch, params, progress=True)
                    results.append(row(llm, hints, name, answers, chosen, time.perf_counter() - start))
                    print(" | ".join(f"{key} {value}" for key, value in results[-1].items()), flush=True)
        finally:
            backend.close()
    metrics = list(sweep.default_metrics(cfg))
    print("\n| llm | hints | prompt | " + " | ".join(metrics) + " | echoed | precision | recall |\n|---|---|---|"
          + "---|" * (len(metrics) + 3))
    share = lambda v: "" if v is None else f"{100 * v:.0f} %"  # noqa: E731
    for r in results:
        print(f"| {r['llm']} | {r['hints']} | {r['prompt']} | " + " | ".join(f"{r[m]:.1f}" for m in metrics)
              + f" | {share(r['echoed'])} | {share(r['precision'])} | {share(r['recall'])} |")
    if args.json:
        print(json.dumps({"rows": results}))


if __name__ == "__main__":
    main()
