"""The entry point: the attacks on a config's real data with the real models and mechanisms (``run_demo_mia``,
what ``benchmarks/mia.py`` runs), and the data it reads."""

from __future__ import annotations

from collections.abc import Callable, Sequence

from dpicl import methods as registry
from dpicl.config import Config
from dpicl.evaluation.mia.common import Record, _timed
from dpicl.evaluation.mia.label import label_attack_scores
from dpicl.evaluation.mia.probability import probability_attack_scores
from dpicl.evaluation.mia.repeat import repeat_attack_scores, repeat_trials
from dpicl.evaluation.mia.scores import MIAResult, to_results
from dpicl.evaluation.mia.settings import plan_probability_settings, planned_setting
from dpicl.methods.adapmixed import AdaPMixED
from dpicl.methods.dp_fewshot import DPFewShot
from dpicl.methods.dps_mozo import DPSMozo
from dpicl.methods.esa import ESA
from dpicl.methods.ksa_jem import KSAJointEM
from dpicl.methods.ksa_ptr import KSAPTR
from dpicl.methods.ksa_public import KSAPublic
from dpicl.methods.rnm import RNM
from dpicl.methods.sga import SGA
from dpicl.methods.synthetic_icl import SyntheticICL

REPEAT_METHODS = (ESA.name, KSAJointEM.name, KSAPTR.name, SGA.name, KSAPublic.name, SyntheticICL.name)


def _load_records(cfg: Config) -> tuple[list[Record], list[Record], str | None]:
    """(input, output) of the config's private records and of its public ones, and the public dataset's name,
    read into a scratch in-memory database (as a sweep does)."""
    from dpicl.storage import load_records
    from dpicl.storage.db import connect
    from dpicl.storage.ingest import ingest_source

    public_name = cfg.public_dataset or next((d.name for d in cfg.data if d.kind == "public"), None)
    con = connect(":memory:")
    try:
        for source in cfg.data:
            if source.name in (cfg.private_dataset, public_name):
                ingest_source(con, source)
        private = [(r.input, r.output) for r in load_records(con, cfg.private_dataset)]
        public = [(r.input, r.output) for r in load_records(con, public_name)] if public_name else []
    finally:
        con.close()
    if not private:
        raise ValueError(f"config {cfg.name!r}: its private dataset has no records")
    return private, public, public_name


def method_config(cfg: Config, name: str, public_dataset: str | None = None, **method) -> Config:
    """``cfg`` with another method (its defaults, then ``method``); ``public_dataset`` for sga and ksa-public."""
    raw = cfg.model_dump()
    raw["method"] = {**(raw["method"] if cfg.method.name == name else {}), "name": name, **method}
    if public_dataset is not None:
        raw["public_dataset"] = public_dataset
    if name == DPFewShot.name and not raw.get("synthetic"):
        raw["synthetic"] = {"name": "mia-synthetic"}  # required by the config; the attack writes nothing
    return Config.model_validate(raw)


def run_demo_mia(*, members: int = 40, nonmembers: int = 40, teachers: int = 10, shots: int = 1,
                 candidates: int | None = None, epsilons: Sequence[float] = (1.0, 8.0), delta: float = 1e-5,
                 truncate_fraction: float = 0.5, methods: Sequence[str] = REPEAT_METHODS,
                 probability_examples: int = 11, mozo_shots: int = 1, ada_members: int = 4,
                 label_examples: int = 20, label_teachers: int = 10, label_config: str = "agnews-rnm",
                 attacks: Sequence[str] = ("repeat", "probability"), full_icl: bool = False, seed: int | None = None,
                 bootstrap: int = 1000, config: str = "demo", max_new_tokens: int | None = None,
                 backend=None, encoder=None, timings: dict | None = None,
                 progress: Callable[[str], None] | None = None) -> list[MIAResult]:
    """The attacks on real data with the real mechanisms (``backend`` / ``encoder`` default to the config's
    models: SmolLM2-135M and all-MiniLM-L6-v2). ``repeat`` and ``probability`` run on the ``config``'s private
    records (the demo's tickets), split at random into repeat-attack targets (``members`` + ``nonmembers``), the
    probability attack's test set (``probability_examples``) and fillers; ``label`` runs RNM on
    ``label_config``'s records (default AG News, as paper 000). ``seed`` fixes every draw (benchmark mode); None
    draws from the OS. ``max_new_tokens`` caps the generated answers and the probability attack's scored tokens
    (None: the config's). ``progress`` receives stage names (no data). One ``MIAResult`` per attack × method × ε."""
    from dpicl.config import load_config
    from dpicl.privacy.rng import benchmark_rng
    from dpicl.tasks import context

    unknown = set(attacks) - {"repeat", "probability", "label"}
    if unknown:
        raise ValueError(f"unknown attacks {sorted(unknown)}; known: repeat, probability, label")
    if set(methods) - set(REPEAT_METHODS):
        raise ValueError(f"unknown repeat-attack methods {sorted(set(methods) - set(REPEAT_METHODS))}; known: "
                         f"{', '.join(REPEAT_METHODS)}")
    say = progress or (lambda message: None)
    cfg = load_config(config)
    if max_new_tokens is not None:
        raw = cfg.model_dump()
        raw["generation"]["max_new_tokens"] = max_new_tokens
        cfg = Config.model_validate(raw)
    rng = benchmark_rng(seed)
    results: list[MIAResult] = []
    if backend is None:
        say("loading the LLM")
        with _timed(timings, "model loading"):
            backend = context.backend(cfg)
    if "repeat" in attacks or "probability" in attacks:
        records, public, public_name = _load_records(cfg)
        n_repeat = (members + nonmembers) if "repeat" in attacks else 0
        n_prob = probability_examples if "probability" in attacks else 0
        if n_repeat + n_prob >= len(records):
            raise ValueError(f"{n_repeat + n_prob} targets leave no fillers among {len(records)} records")
        order = [int(i) for i in rng.permutation(len(records))]
        repeat_targets, prob_targets = order[:n_repeat], order[n_repeat:n_repeat + n_prob]
        fillers = order[n_repeat + n_prob:]
    if "repeat" in attacks:
        if encoder is None:
            say("loading the encoder")
            with _timed(timings, "model loading"):
                encoder = context.encoder(cfg)
        size = {"teachers": teachers, "shots": shots}
        configs = [method_config(cfg, name, public_name if registry.get(name).needs_public else None, **size,
                                 **({"candidates": candidates} if registry.get(name).samples_candidates and candidates
                                    else {}))
                   for name in methods if name != SyntheticICL.name]
        fewshot = (method_config(cfg, DPFewShot.name, public_name, splits=teachers, shots=shots)
                   if SyntheticICL.name in methods else None)
        trials = repeat_trials(repeat_targets[:members], repeat_targets[members:], fillers, teachers=teachers,
                               shots=shots, rng=rng)
        say(f"repeat attack: {len(trials)} queries × {teachers} teachers, methods {', '.join(methods)}")
        scores = repeat_attack_scores(backend, encoder, configs or [method_config(cfg, ESA.name, **size)], records,
                                      trials, epsilons=epsilons, delta=delta, public=public, fewshot=fewshot,
                                      truncate_fraction=truncate_fraction, full_icl=full_icl, rng=rng,
                                      timings=timings)
        results += to_results("repeat", scores, bootstrap=bootstrap, rng=rng)
    if "probability" in attacks:
        gen = cfg.generation
        with _timed(timings, "planning"):
            settings = plan_probability_settings(epsilons, delta, n_records=len(records), queries=n_prob,
                                                 max_new_tokens=gen.max_new_tokens, mozo_shots=mozo_shots,
                                                 ada_members=ada_members)
        say(f"probability attack: {n_prob} queries × {n_prob} demonstrations")
        scores = probability_attack_scores(backend, cfg.task, records, prob_targets, fillers,
                                           max_new_tokens=gen.max_new_tokens, mozo_settings=settings[DPSMozo.name],
                                           ada_settings=settings[AdaPMixED.name], mozo_shots=mozo_shots,
                                           ada_members=ada_members, rng=rng, timings=timings)
        results += to_results("probability", scores, bootstrap=bootstrap, rng=rng)
    if "label" in attacks:
        label_cfg = load_config(label_config)
        labelled, _, _ = _load_records(label_cfg)
        if label_examples + label_teachers >= len(labelled):
            raise ValueError(f"{label_config}: {len(labelled)} records are too few for the label attack")
        order = [int(i) for i in rng.permutation(len(labelled))]
        test, label_fillers = order[:label_examples], order[label_examples:]
        rate = label_teachers / len(labelled)  # one-shot teachers
        settings = [planned_setting(RNM.name, eps, delta, sampling_rate=rate, queries=label_examples,
                                    forced_queries=label_examples)[1] for eps in epsilons]
        say(f"label attack ({label_config}): {label_examples} queries × {label_examples} demonstrations")
        with _timed(timings, "label attack (LLM)"):
            scores = label_attack_scores(backend, label_cfg, labelled, test, label_fillers, teachers=label_teachers,
                                         rnm_settings=settings, rng=rng)
        results += to_results("label", scores, bootstrap=bootstrap, rng=rng)
    return results
