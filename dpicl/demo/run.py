"""`dpicl demo`: the whole product on bundled, fictional data.

Ingests ~300 private support tickets (10 carry planted canaries: unique fake identifiers), a public set and
a backlog of 24 queries; opens a budget planned for 20 queries; answers the backlog on SmolLM2 through the
`answer_backlog` Prefect flow with the demo config's method (SGA with the public tickets: it measured best on this
data); then compares the answers with the free alternatives (the zero-shot answer; 4-shot ICL with the most similar
public tickets) and with the non-private baseline a careless deployment would use (4-shot ICL with the most
similar private tickets), generated for the answered queries only. It scores them all against the backlog's
bundled reference summaries (ROUGE-L) and counts the planted canaries in the answers.
"""

from __future__ import annotations

import json
import os
import re
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import replace
from importlib import resources
from pathlib import Path

from rich.console import Console
from rich.table import Table

DEMO_EPSILON = 4.0
DEMO_DELTA = 1e-4
NONPRIVATE_SHOTS = 4


def data_file(name: str) -> Path:
    return Path(str(resources.files("dpicl.demo") / "data" / name))


def canaries() -> list[str]:
    return json.loads(data_file("canaries.json").read_text(encoding="utf-8"))


def canary_hits(answers: list[str], planted: list[str]) -> int:
    """How many answers contain at least one planted canary (case-insensitive)."""
    lowered = [c.lower() for c in planted]
    return sum(any(c in a.lower() for c in lowered) for a in answers)


def baseline_prompts(cfg, private, public, queries: list[str], *, public_fewshot: bool = True) -> dict[str, list[str]]:
    """The alternatives' prompts: the free ones, zero-shot (no demonstrations) and 4-shot ICL with each query's most
    similar public tickets (not with `public_fewshot=False`: the flow generated them), and the leaky non-private
    baseline, 4-shot ICL with its most similar private ones."""
    from dpicl.embeddings.candidates import most_similar
    from dpicl.prompts import render_prompt, zero_shot_prompt
    from dpicl.tasks import context

    encoder = context.encoder(cfg)
    # batched: public texts, and the private tickets of the non-private baseline, whose answers are never released
    query_vectors = encoder.encode(queries, batched=True)  # once for both sets of nearest tickets

    def nearest_shots(records) -> list[str]:
        nearest = most_similar(query_vectors, encoder.encode([r.input for r in records], batched=True),
                               NONPRIVATE_SHOTS)
        return [render_prompt(cfg.task, [(records[i].input, records[i].output) for i in reversed(row)], q)
                for q, row in zip(queries, nearest)]

    prompts = {"zero-shot": [zero_shot_prompt(cfg.task, q) for q in queries], "non-private": nearest_shots(private)}
    if public_fewshot:
        prompts["public few-shot"] = nearest_shots(public)
    return prompts


def stored_public_fewshot(con, cfg, queries: list[str]) -> list[str] | None:
    """The free public few-shot answers as the flow already generated them: with `public_fewshot` of the demo's size,
    the last public prompt of each query is the public few-shot baseline's prompt (SGA's extra candidate). None
    when the config has no such prompt."""
    if getattr(cfg.method, "public_fewshot", None) != NONPRIVATE_SHOTS:
        return None
    from dpicl.storage.artifacts import get_artifact
    from dpicl.tasks.rerun import feature_keys

    return [get_artifact(con, feature_keys(cfg, query, None)["public_outputs"])[-1] for query in queries]


def stored_consensus(con, cfg, queries: list[str]) -> tuple[str, list[str]] | None:
    """The free consensus answers, from texts the flow already generated and embedded without private data (SGA's
    public teachers' answers, ESA's zero-shot candidates): per query, the one nearest all the others
    (`dpicl.embeddings.candidates.consensus`). (label, answers), or None for a method without such texts."""
    from dpicl import methods
    from dpicl.embeddings.candidates import consensus
    from dpicl.evaluation.sweep import FREE_CONSENSUS
    from dpicl.storage.artifacts import get_artifact
    from dpicl.tasks.rerun import feature_keys

    public = methods.get(cfg.method.name).public_texts
    if public is None:
        return None
    answers = []
    for query in queries:
        keys = feature_keys(cfg, query, None)
        texts = get_artifact(con, keys[public.texts])
        answers.append(texts[consensus(get_artifact(con, keys[public.embeddings]))])
    return FREE_CONSENSUS[public.source], answers


@contextmanager
def torch_threads(count: int) -> Iterator[None]:
    """torch's intra-op threads set to `count` within (process-wide: only where nothing else runs), restored after."""
    import torch

    before = torch.get_num_threads()
    torch.set_num_threads(count)
    try:
        yield
    finally:
        torch.set_num_threads(before)


FREE_LABELS = {"zero-shot": "zero-shot", "public few-shot": f"public {NONPRIVATE_SHOTS}-shot",
               "public consensus": "public consensus", "zero-shot consensus": "zero-shot consensus"}


def best_free(quality: dict[str, float]) -> str:
    """The free alternative that scored highest (a key of `quality`; the consensus ones where the method has them)."""
    return max((name for name in FREE_LABELS if name in quality), key=lambda name: quality[name])


def verdict(quality: dict[str, float], public_teachers: int) -> str:
    """One line on whether the DP answers were worth their budget: against the best free alternative (and, where
    that is a public one, the config that releases it; the consensus over `public_teachers` one-shot prompts)."""
    best = best_free(quality)
    dp, free = quality["dp"], quality[best]
    if dp > free:
        return f"the DP answers scored {dp - free:.1f} above the best free alternative ({FREE_LABELS[best]})"
    return (f"[yellow]the free {FREE_LABELS[best]} answers scored {free:.1f}, the DP answers {dp:.1f}: on data like "
            "this the budget bought nothing (one run, fresh noise each time); `dpicl evaluate` compares the two on "
            f"benchmark or public data like yours (its scores are not private){free_release(best, public_teachers)}[/]")


def free_release(best: str, public_teachers: int) -> str:
    """How the pipeline releases the free alternative `best` itself, at no cost (README, "Methods"); "" if it
    cannot."""
    extra = {"public few-shot": "", "public consensus": f", consensus: {public_teachers}"}.get(best)
    if extra is None:
        return ""
    return (f"; `method: {{name: synthetic-icl, demos_dataset: <public>, shots: {NONPRIVATE_SHOTS}, "
            f"demonstrations: nearest{extra}}}` answers a backlog with it for free")


def rouge_l(answers: list[str], references: list[str]) -> float:
    """Mean ROUGE-L F1 (0–100) of `answers` against their references."""
    from dpicl.metrics import rouge

    return rouge(answers, references)["rougeL"] if answers else float("nan")


def shorten(text: str, width: int = 90) -> str:
    return text if len(text) <= width else text[: width - 1].rsplit(" ", 1)[0] + "…"


def run_demo(db: Path, *, console: Console, as_json: bool = False) -> dict:
    from dpicl.config import load_config
    from dpicl.tasks import context

    cfg = load_config("demo")
    # load the models meanwhile: while Prefect is imported, the data ingested and Prefect's temporary server started
    # (a process of its own); the flow's tasks find them loaded, or wait for the load under way (context's lock)
    threading.Thread(target=lambda: (context.encoder(cfg), context.backend(cfg)), daemon=True).start()

    from dpicl.flows.answer_backlog import answer_backlog
    from dpicl.inference.teachers import greedy_params
    from dpicl.storage import load_records
    from dpicl.storage.db import connect
    from dpicl.storage.ingest import ingest_source
    from dpicl.storage.ledger import open_budget, stored_releases

    for stale in (db, db.with_name(db.name + ".wal")):
        stale.unlink(missing_ok=True)
    con = connect(db)
    try:
        for source in cfg.data:
            ingest_source(con, source)
        open_budget(con, cfg.private_dataset, DEMO_EPSILON, DEMO_DELTA)
    finally:
        con.close()
    console.print(f"[bold]dpicl demo[/]: budget ε={DEMO_EPSILON:g}, δ={DEMO_DELTA:g} on {cfg.private_dataset!r}; "
                  f"answering {cfg.backlog!r} with {cfg.method.name} ({cfg.method.teachers} teachers × "
                  f"{cfg.method.shots} shot{'s' if cfg.method.shots != 1 else ''} each)")

    result = answer_backlog(config="demo", db=str(db))

    con = connect(db)
    try:
        released = stored_releases(con, cfg.backlog)
        backlog = con.execute("SELECT query_id, input, reference FROM queries WHERE backlog = ? ORDER BY row_no",
                              [cfg.backlog]).fetchall()
        private, public = load_records(con, cfg.private_dataset), load_records(con, cfg.public_dataset)
        # the answered queries only: the refused ones have no DP answer to compare with
        tickets = {query_id: (text, reference) for query_id, text, reference in backlog}
        answered = [tickets[r["query_id"]] for r in released]
        refused = sorted(set(tickets) - {r["query_id"] for r in released})
        public_fewshot = stored_public_fewshot(con, cfg, [text for text, _ in answered])
        consensus_label, consensus_answers = stored_consensus(con, cfg, [text for text, _ in answered]) or (None, [])
    finally:
        con.close()
    console.print(f"generating the alternatives to compare the DP answers with: zero-shot and {NONPRIVATE_SHOTS}-shot "
                  "answers from the most similar public tickets"
                  + (f" and the {consensus_label} (the public answer nearest all the others)"
                     if consensus_label else "")
                  + f" (free), and {NONPRIVATE_SHOTS}-shot answers from the most similar private tickets "
                  "(non-private: what a careless deployment would release)")
    with torch_threads(os.cpu_count() or 1):  # the flow is done: its nearest tickets found on every core
        # the public few-shot answers, where the flow generated them, are not generated twice
        prompts = baseline_prompts(cfg, private, public, [text for text, _ in answered],
                                   public_fewshot=public_fewshot is None)
    params = greedy_params(cfg)
    free = {name: context.backend(cfg).generate(p, replace(params, public_prompts=name != "non-private"),
                                                progress=True)
            for name, p in prompts.items()}
    if public_fewshot is not None:
        free["public few-shot"] = public_fewshot
    if consensus_label:
        free[consensus_label] = consensus_answers

    table = Table(title="released answers (differentially private)")
    for column in ("query", "ticket", "answer"):
        table.add_column(column)
    for r in released:
        table.add_row(r["query_id"], shorten(tickets[r["query_id"]][0]), r["answer"])
    console.print(table)

    # quality on the released queries: each answer against the backlog's bundled reference summary
    references = [reference for _, reference in answered]
    quality = {"dp": rouge_l([r["answer"] for r in released], references)}
    quality.update({name: rouge_l(answers, references) for name, answers in free.items()})

    budget = result["budget"]
    planted = canaries()
    summary = {
        "answered": result["answered"],
        "refused": result["refused_budget"],
        "epsilon_spent": budget["epsilon_spent"],
        "epsilon_limit": budget["epsilon_limit"],
        "delta": budget["delta"],
        "canary_hits_nonprivate": canary_hits(free["non-private"], planted),
        "canary_hits_dp": canary_hits([r["answer"] for r in released], planted),
        "nonprivate_answers": len(free["non-private"]),
        "queries_still_payable": budget["queries_still_payable"],
        "rougeL_dp": quality["dp"],
        "rougeL_zero_shot": quality["zero-shot"],
        "rougeL_public_few_shot": quality["public few-shot"],
        "rougeL_nonprivate": quality["non-private"],
        **({"rougeL_" + re.sub(r"\W", "_", consensus_label): quality[consensus_label]} if consensus_label else {}),
        "dp_above_free": quality["dp"] > quality[best_free(quality)],
    }
    console.print(
        f"budget: ε spent {summary['epsilon_spent']:.4f} of {summary['epsilon_limit']:g} (δ={summary['delta']:g}); "
        f"{summary['answered']} answered, {summary['refused']} refused because the budget could not pay"
        + (f" ({', '.join(refused)})" if refused else "")
    )
    console.print(
        f"canaries ({len(planted)} planted in the private tickets): found in "
        f"{summary['canary_hits_nonprivate']} of {summary['nonprivate_answers']} non-private answers, "
        f"in {summary['canary_hits_dp']} of {len(released)} DP answers"
    )
    console.print(
        f"quality on the {len(released)} answered queries (ROUGE-L F1 against the bundled reference summaries, "
        f"higher is better): DP answers {quality['dp']:.1f}; free: zero-shot {quality['zero-shot']:.1f}, public "
        f"{NONPRIVATE_SHOTS}-shot {quality['public few-shot']:.1f}"
        + (f", {consensus_label} {quality[consensus_label]:.1f}" if consensus_label else "")
        + f"; non-private {NONPRIVATE_SHOTS}-shot "
        f"{quality['non-private']:.1f}"
    )
    console.print(verdict(quality, cfg.method.teachers))
    console.print(f"the demo's database is {str(db)!r}; look around with `dpicl releases {cfg.backlog} --db {db}` "
                  f"and `dpicl budget show {cfg.private_dataset} --db {db}`, then see the README, \"Using it on your "
                  "data\"")
    if as_json:
        print(json.dumps(summary))
    return summary
