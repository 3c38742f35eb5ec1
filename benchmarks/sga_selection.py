"""Why SGA top-1 stays at the free public 4-shot answer on the demo tickets: how good a public candidate the
private teachers point at, and how much of that pointing survives the noise of the run's plan.

    .venv/bin/dpicl demo            # writes dpicl-demo.duckdb
    .venv/bin/python benchmarks/sga_selection.py [--db dpicl-demo.duckdb] [--draws 200] [--json]

For each answered query of the run in the database, from its stored artifacts: the public candidates (the public
teachers' answers and, last, the public 4-shot answer) and their embeddings, the private teachers' answer
embeddings, and the reference summary. It scores (ROUGE-L against the reference) the candidate nearest the private
teachers' consensus (the sum of their embeddings), the same choice with Gaussian noise of the plan's leaf-sum σ
added to that sum (`--draws` draws), and, for scale, the mean candidate, the public 4-shot answer, the public
candidates' own consensus (`dpicl evaluate`'s free `public consensus`) and the best candidate. A simplification of
SGA's last step: one cluster holding every private answer, DPM's tree and the public points of a leaf left out.
Then the same private choice, with and without noise, among only the `--central` public candidates nearest the
others (a free shortlist): whether the private teachers add anything to the public consensus. Prints only numbers.
"""

from __future__ import annotations

import argparse
import io
import json

import numpy as np

from dpicl.embeddings.candidates import consensus
from dpicl.metrics import rouge
from dpicl.storage.db import connect
from dpicl.storage.runs import stored_plan


def stage_payloads(con, run_id: str, stage: str) -> dict[str, object]:
    """{query id: payload} of one stage's artifacts, as the run keyed them (artifacts shared from an earlier run
    count too: the run's own keys are what its releases name)."""
    rows = con.execute("SELECT a.query_id, a.format, a.payload FROM artifacts a WHERE a.stage = ? AND a.query_id IN "
                       "(SELECT query_id FROM releases WHERE run_id = ?)", [stage, run_id]).fetchall()
    return {q: np.load(io.BytesIO(p), allow_pickle=False) if fmt == "npy" else json.loads(bytes(p).decode())
            for q, fmt, p in rows}


def unit(rows: np.ndarray) -> np.ndarray:
    return rows / np.linalg.norm(rows, axis=1, keepdims=True)


def private_choice(candidates: np.ndarray, private: np.ndarray, sigma: float, draws: int,
                   rng: np.random.Generator) -> tuple[int, np.ndarray]:
    """The candidate nearest the private teachers' summed embeddings, and that choice with the sum noised
    (`draws` draws of Gaussian noise of scale `sigma`)."""
    noisy = np.argmax((private + rng.normal(0.0, sigma, (draws, private.size))) @ candidates.T, axis=1)
    return int(np.argmax(candidates @ private)), noisy


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--db", default="dpicl-demo.duckdb")
    parser.add_argument("--draws", type=int, default=200)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--central", type=int, nargs="+", default=[2, 3, 5],
                        help="shortlist sizes: the private choice among the public candidates nearest the others")
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    con = connect(args.db, read_only=True)
    try:
        run_id, method = con.execute("SELECT run_id, method FROM runs ORDER BY started_at DESC LIMIT 1").fetchone()
        if method != "sga":
            raise SystemExit(f"the latest run in {args.db} answered with {method}, not sga")
        sigma = stored_plan(con, run_id)[0]["sigma"]
        teachers = stage_payloads(con, run_id, "teacher_embeddings")
        public = stage_payloads(con, run_id, "public_embeddings")
        texts = stage_payloads(con, run_id, "public_outputs")
        references = dict(con.execute("SELECT query_id, reference FROM queries").fetchall())
    finally:
        con.close()
    rng = np.random.default_rng(args.seed)
    scores: dict[str, list[float]] = {name: [] for name in (
        "private consensus", "private consensus, noisy", "mean candidate", "public 4-shot", "public consensus",
        "best candidate")}
    for size in args.central:
        scores[f"private among {size} central"], scores[f"private among {size} central, noisy"] = [], []
    agreement = []
    for query in sorted(teachers):
        candidates = unit(public[query])
        rouge_l = np.array([rouge([text], [references[query]])["rougeL"] for text in texts[query]])
        private = teachers[query].sum(axis=0)
        chosen, noisy = private_choice(candidates, private, sigma, args.draws, rng)
        agreement.append(float(np.mean(noisy == chosen)))
        central = np.argsort(-(candidates @ candidates.sum(axis=0)), kind="stable")
        for size in args.central:
            shortlist = central[:size]
            best, drawn = private_choice(candidates[shortlist], private, sigma, args.draws, rng)
            scores[f"private among {size} central"].append(rouge_l[shortlist[best]])
            scores[f"private among {size} central, noisy"].append(float(rouge_l[shortlist[drawn]].mean()))
        scores["private consensus"].append(rouge_l[chosen])
        scores["private consensus, noisy"].append(float(rouge_l[noisy].mean()))
        scores["mean candidate"].append(float(rouge_l.mean()))
        scores["public 4-shot"].append(rouge_l[-1])
        scores["public consensus"].append(rouge_l[consensus(public[query])])
        scores["best candidate"].append(float(rouge_l.max()))
    means = {name: float(np.mean(values)) for name, values in scores.items()}
    print(f"run {run_id}: {len(agreement)} answered queries, {len(texts[query])} public candidates and "
          f"{len(teachers[query])} private teachers each, leaf-sum noise σ = {sigma:.3f}")
    print(f"the noisy choice is the noiseless one in {np.mean(agreement):.0%} of {args.draws} draws")
    free = np.array(scores["public 4-shot"])
    against = {}  # paired with the public 4-shot answer: queries above, below
    for name, value in means.items():
        diff = np.array(scores[name]) - free
        against[name] = {"above": int((diff > 0).sum()), "below": int((diff < 0).sum())}
        print(f"  {name:34s} ROUGE-L {value:5.1f}  (above the public 4-shot answer in {against[name]['above']}, "
              f"below in {against[name]['below']})")
    if args.json:
        print(json.dumps({"run_id": run_id, "queries": len(agreement), "sigma": sigma,
                          "agreement": float(np.mean(agreement)), "rougeL": means, "against_public_4shot": against}))


if __name__ == "__main__":
    main()
