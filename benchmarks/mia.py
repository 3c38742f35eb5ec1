"""Membership-inference attacks on the demo data: AUROC of non-private ICL vs the DP methods (issue 7 item 2).

    .venv/bin/python benchmarks/mia.py --members 20 --nonmembers 20 --attacks repeat label --seed 0
        [--json out.json] [--plot roc.png]

Repeat attack (paper 004 §5.4): truncated private tickets as queries; cosine similarity (all-MiniLM-L6-v2) of the
answer with the target's summary; non-private ICL, non-private aggregation, and ESA, KSA joint-EM, KSA-PTR, SGA,
KSA-public and DP few-shot generation → synthetic ICL at ε = ∞ and each ε. Probability attack (paper 000 App D.1):
mean log-probability of the true summary given a one-shot demonstration; non-private one-shot ICL, DPS-MOZO and
AdaPMixED at each ε. Label attack (000 on AG News): log-probability of the true label, one-shot ICL vs RNM.
SmolLM2-135M on CPU (one torch thread). See ``dpicl/evaluation/mia/`` for the setups and what the two ε columns
mean. Prints measured timings.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--members", type=int, default=40, help="repeat attack: member targets")
    parser.add_argument("--nonmembers", type=int, default=40, help="repeat attack: non-member targets")
    parser.add_argument("--teachers", type=int, default=10)
    parser.add_argument("--shots", type=int, default=1)
    parser.add_argument("--candidates", type=int,
                        help="ESA's sampled zero-shot candidates (default: ESA's own default)")
    parser.add_argument("--full-icl", action="store_true", help="also one prompt with all teachers × shots demos")
    parser.add_argument("--truncate", type=float, default=0.5, help="fraction of the target's words queried")
    parser.add_argument("--examples", type=int, default=11, help="probability attack: test records (n; n members, "
                        "n(n-1) non-members)")
    parser.add_argument("--methods", nargs="+", default=None, help="repeat attack: the DP methods (default all)")
    parser.add_argument("--label-examples", type=int, default=20, help="label attack: test records")
    parser.add_argument("--label-teachers", type=int, default=10, help="label attack: RNM's one-shot teachers")
    parser.add_argument("--label-config", default="agnews-rnm", help="label attack: a classification config")
    parser.add_argument("--mozo-shots", type=int, default=1)
    parser.add_argument("--ada-members", type=int, default=4)
    parser.add_argument("--epsilons", type=float, nargs="+", default=[1.0, 8.0])
    parser.add_argument("--delta", type=float, default=1e-5)
    parser.add_argument("--attacks", nargs="+", choices=["repeat", "probability", "label"],
                        default=["repeat", "probability", "label"])
    parser.add_argument("--max-new-tokens", type=int, default=None,
                        help="cap on the generated and scored tokens (default: the config's)")
    parser.add_argument("--bootstrap", type=int, default=1000)
    parser.add_argument("--seed", type=int, default=0, help="fixes every draw (benchmark mode)")
    parser.add_argument("--json", type=Path, help="write the rows and timings here")
    parser.add_argument("--plot", type=Path, help="write the ROC curves (one panel per attack) to this PNG")
    args = parser.parse_args()

    import torch

    torch.set_num_threads(1)
    from dpicl.evaluation.mia import REPEAT_METHODS, markdown_table, roc_plot, run_demo_mia

    timings: dict[str, float] = {}
    start = time.perf_counter()
    results = run_demo_mia(
        members=args.members, nonmembers=args.nonmembers, teachers=args.teachers, shots=args.shots,
        candidates=args.candidates, epsilons=args.epsilons, delta=args.delta, truncate_fraction=args.truncate,
        methods=args.methods or REPEAT_METHODS, probability_examples=args.examples, mozo_shots=args.mozo_shots,
        ada_members=args.ada_members, label_examples=args.label_examples, label_teachers=args.label_teachers,
        label_config=args.label_config,
        attacks=args.attacks, full_icl=args.full_icl, seed=args.seed, bootstrap=args.bootstrap,
        max_new_tokens=args.max_new_tokens, timings=timings,
        progress=lambda message: print(f"[{time.perf_counter() - start:7.1f}s] {message}", file=sys.stderr,
                                       flush=True))
    total = time.perf_counter() - start
    print(markdown_table(results))
    print()
    print("timings (s): " + ", ".join(f"{k} {v:.1f}" for k, v in timings.items()) + f"; total {total:.1f}")
    if args.plot:
        roc_plot(results, args.plot)
        print(f"wrote {args.plot}")
    if args.json:
        args.json.write_text(json.dumps({"args": {k: (str(v) if isinstance(v, Path) else v)
                                                  for k, v in vars(args).items()},
                                         "results": [r.to_dict() for r in results],
                                         "timings": {**timings, "total": total}}, indent=2), encoding="utf-8")


if __name__ == "__main__":
    main()
