"""Which method to start with, per kind of task: the best DP method each of our measurements found, next to the free
baselines of the same run (docs/BENCHMARKS.md, the section each entry names). All were measured with the embedded
SmolLM2-135M (one SST-2 run: Gemma 3 270M) on a 2-core CPU (the 24-teacher SAMSum runs generated on a GPU, as did
part of one E2E repetition), on 24–100 queries, one to three repetitions: a starting point, to be checked with
`dpicl evaluate` on benchmark or public data like yours (its scores are not private)."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Recommendation:
    situation: str
    method: str
    settings: dict
    measured: str  # the DP figure next to the free baselines of the same run
    section: str  # the docs/BENCHMARKS.md section that holds the run


RECOMMENDATIONS = (
    Recommendation(
        "text answers, with a public dataset of the same kind",
        "sga", {"select": "top1", "public_demonstrations": "nearest", "public_fewshot": 4},
        "SAMSum, ε = 3, 24 + 24 four-shot teachers: ROUGE-L 26.5 against 17.7 zero-shot and 22.9 public few-shot "
        "(100 dialogues, 3 repetitions); with 10 or 6 one-shot teachers not above the free public 4-shot answer: "
        "demo tickets, ε = 4: 41.7 ± 3.3 against 21.8 zero-shot and 42.1 public 4-shot (3 repetitions; 30.3 with "
        "random public demonstrations), ChatDoctor, ε = 3: 14.2 against 16.3 (30 questions): compare with it "
        "first; ksa-public, with its task prompt, as good at ε = 4 on the demo tickets (40.2 ± 0.9 against SGA's "
        "40.3 ± 3.3 without `public_fewshot`, 3 repetitions), weaker at ε = 1 (37.9 against 41.3); and the free "
        "public consensus (the public answer nearest the others, which `dpicl evaluate` prints) scored above SGA: "
        "22.45 against 20.5 on SAMSum at ε = 3 (30 dialogues), 47.9 against 38.0 on the demo tickets at ε = 4; "
        "where it wins, `synthetic-icl` with `demonstrations: nearest` and `consensus` releases it for free",
        "The demo's method (`dpicl evaluate` on the demo data)"),
    Recommendation(
        "text in a fixed format (data-to-text), no public data",
        "dp-fewshot", {},
        "E2E, ε = 3: synthetic demonstrations, then `synthetic-icl` answers for free: ROUGE-L 47.5 ± 6.1 against "
        "12.5 zero-shot and 48.9 non-private 4-shot (100 queries, 3 repetitions; 43.5 at ε = 1); one charge for "
        "any number of queries; not for free-form text: on SAMSum's dialogue summaries 13.0 ± 4.1 at ε = 3 "
        "against 17.7 zero-shot (one shot per split, 3 repetitions; 18.9 ± 1.7 with four shots, 3 repetitions)",
        "Utility against the free baselines (`benchmarks/utility.py`)"),
    Recommendation(
        "free-form text, no public data",
        "esa", {"teachers": 24, "shots": 4, "candidates": 32},
        "SAMSum, ε = 3, 24 four-shot teachers and 32 candidates (`samsum-esa-4shot`): ROUGE-L 22.1 ± 0.1 against "
        "17.7 zero-shot and 23.3 non-private 4-shot, 100 dialogues, 3 repetitions; 6 one-shot teachers: 18.4 ± "
        "0.5; KSA stayed at zero-shot with this model",
        "Utility against the free baselines (`benchmarks/utility.py`)"),
    Recommendation(
        "classification",
        "rnm", {"task.calibrate": True},
        "AG News, ε = 3: accuracy 65.7 against 55.0 zero-shot and 60.7 non-private 4-shot (3 repetitions); SST-2 "
        "with Gemma 3 270M (`model.llm: gemma-3-270m`): 85.0 ± 0.8 against 81.0 zero-shot and 84.3 non-private; "
        "with SmolLM2 the free calibrated zero-shot answer (83.0) beat RNM (80.7), and on TREC, which nothing was "
        "tuned on, 42.0 against 37.7 ± 1.2 (3 repetitions; 2.3 with plain votes): calibrate, and compare first",
        "Utility against the free baselines (`benchmarks/utility.py`)"),
)


def recommended_for(method: str) -> list[str]:
    """The situations the method is recommended for."""
    return [r.situation for r in RECOMMENDATIONS if r.method == method]
