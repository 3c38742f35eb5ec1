"""The `evaluate` flow (privacy–utility sweeps) with fake models: what it stores, plots and reports, that it
charges and releases nothing, and that its configs must share one ensemble."""

from __future__ import annotations

import hashlib
import json

import duckdb
import numpy as np
import pytest
import yaml

from dpicl.config import Config, load_config
from dpicl.evaluation import sweep
from dpicl.evaluation.report import markdown_table, summarize
from tests.pipeline.conftest import write_jsonl

N_QUERIES = 6


def _fake_greedy(prompt: str) -> str:
    """What tests.pipeline.fakes.FakeBackend answers greedily."""
    return f"summary {hashlib.sha256(prompt.encode()).hexdigest()[:6]}"


@pytest.fixture
def sweep_env(tmp_path, fake_models):
    """Configs of esa, ksa-jem, ksa-ptr, sga and ksa-public over one tiny private/public/backlog data set whose
    references are the fake model's zero-shot answers (so the zero-shot row scores 100)."""
    from dpicl.prompts import zero_shot_prompt

    private = write_jsonl(tmp_path / "private.jsonl", [
        {"id": f"r{i}", "text": f"private ticket {i} topic {i % 3}", "summary": f"private summary {i}"}
        for i in range(40)])
    public = write_jsonl(tmp_path / "public.jsonl", [
        {"id": f"p{i}", "text": f"public example {i}", "summary": f"public answer {i}"} for i in range(20)])
    task = Config.model_validate({"name": "x", "private_dataset": "p", "backlog": "b"}).task
    queries = [f"incoming ticket {i}" for i in range(N_QUERIES + 2)]
    backlog = write_jsonl(tmp_path / "backlog.jsonl", [
        {"id": f"q{i}", "text": q, "reference": _fake_greedy(zero_shot_prompt(task, q))}
        for i, q in enumerate(queries)])
    data = [
        {"name": "tiny", "kind": "private", "path": str(private),
         "fields": {"id": "id", "input": "text", "output": "summary"}},
        {"name": "tiny-public", "kind": "public", "path": str(public),
         "fields": {"id": "id", "input": "text", "output": "summary"}},
        {"name": "tiny-backlog", "kind": "queries", "path": str(backlog),
         "fields": {"id": "id", "input": "text", "output": None, "reference": "reference"}},
    ]
    paths = []
    for method in ({"name": "esa", "candidates": 3}, {"name": "ksa-jem"}, {"name": "ksa-ptr"},
                   {"name": "sga", "k": 2}, {"name": "ksa-public"}):
        path = tmp_path / f"tiny-{method['name']}.yaml"
        path.write_text(yaml.safe_dump({
            "name": f"tiny-{method['name']}", "private_dataset": "tiny", "backlog": "tiny-backlog",
            "public_dataset": "tiny-public", "data": data,
            "method": {"teachers": 4, "shots": 2, **method}}))
        paths.append(str(path))
    return paths, tmp_path


@pytest.mark.slow  # starts Prefect
def test_sweep_stores_plots_and_reports_every_setting_and_charges_nothing(sweep_env):
    from dpicl.flows.evaluate import evaluate

    configs, tmp = sweep_env
    db = tmp / "eval.duckdb"
    result = evaluate(configs=configs, epsilons=[8.0, 1.0], queries=N_QUERIES, repetitions=2, seed=3,
                      out_dir=str(tmp / "out"), db=str(db))

    con = duckdb.connect(str(db), read_only=True)
    rows = con.execute("SELECT setting, method, epsilon, repetition, metric, value, queries FROM evaluations "
                       "WHERE sweep_id = ?", [result["sweep_id"]]).fetchall()
    spent = con.execute("SELECT count(*) FROM ledger").fetchone()[0] + con.execute(
        "SELECT count(*) FROM releases").fetchone()[0]
    con.close()
    assert spent == 0, "a sweep must neither charge a ledger nor write releases"

    settings = {r[0] for r in rows}
    expected = {"zero-shot", "few-shot", "public few-shot", "public consensus", "zero-shot consensus"} | {
        f"{m} ε={e}" for m in ("esa", "ksa-jem", "ksa-ptr", "sga", "sga top-1", "ksa-public") for e in ("1", "8", "∞")}
    assert settings == expected
    assert len(rows) == len(expected) * 2 * 3 + 3 * 2, "3 ROUGE values per setting and repetition (+ PTR passes)"
    assert {r[6] for r in rows} == {N_QUERIES}
    values = {(r[0], r[3], r[4]): r[5] for r in rows}
    assert values["zero-shot", 0, "rougeL"] == pytest.approx(100.0)  # the references are its answers
    assert values["few-shot", 0, "rougeL"] < 100.0
    # KSA-PTR answers zero-shot when its test fails: its rows can only be as good as zero-shot when none passed
    for rep in (0, 1):
        if values["ksa-ptr ε=1", rep, "ptr_passed_%"] == 0:
            assert values["ksa-ptr ε=1", rep, "rougeL"] == pytest.approx(100.0)

    summary = {s["setting"]: s for s in result["summary"]}
    for setting in expected:
        reps = [values[setting, r, "rouge1"] for r in (0, 1)]
        assert summary[setting]["metrics"]["rouge1"]["mean"] == pytest.approx(np.mean(reps))
        assert summary[setting]["metrics"]["rouge1"]["std"] == pytest.approx(np.std(reps, ddof=1))
    png = (tmp / "out" / f"{result['sweep_id']}.png").read_bytes()
    assert png.startswith(b"\x89PNG") and len(png) > 10_000
    report = (tmp / "out" / f"{result['sweep_id']}.md").read_text()
    assert "| esa ε=1 |" in report and "±" in report
    # zero-shot scores 100 here: every noisy setting below it is named, in the result and in the report
    behind = {s for s in expected
              if "ε=" in s and not s.endswith("∞") and summary[s]["metrics"]["rouge1"]["mean"] < 100}
    assert behind and {line.split(":")[0] for line in result["free_ahead"]} == behind
    assert "A free answer scores higher than these DP settings" in report

    private_texts = [f"private summary {i}" for i in range(40)] + [f"private ticket {i}" for i in range(40)]
    published = json.dumps(result, default=str) + report
    assert not any(t in published for t in private_texts), "private text in the sweep's outputs"


@pytest.mark.slow  # starts Prefect
def test_the_evaluate_command_says_which_dp_settings_a_free_answer_beats(sweep_env):
    from typer.testing import CliRunner

    from dpicl.cli import app

    configs, tmp = sweep_env
    result = CliRunner().invoke(app, ["evaluate", configs[3], "-e", "1", "--queries", str(N_QUERIES), "--seed", "1",
                                      "--out", str(tmp / "cli"), "--db", str(tmp / "cli.duckdb")])
    assert result.exit_code == 0, result.output
    assert "a free answer scores higher than: sga top-1 ε=1: rouge1" in " ".join(result.output.split())


@pytest.mark.slow
def test_a_fixed_seed_reproduces_a_sweep(sweep_env):
    from dpicl.flows.evaluate import evaluate

    configs, tmp = sweep_env

    def run(seed, name):
        result = evaluate(configs=configs[:1], epsilons=[0.5], queries=N_QUERIES, seed=seed,
                          out_dir=str(tmp / name), db=str(tmp / f"{name}.duckdb"))
        return {s["setting"]: s["metrics"] for s in result["summary"]}

    assert run(7, "a") == run(7, "b")


def test_configs_of_different_ensembles_or_token_methods_are_refused(sweep_env):
    configs, tmp = sweep_env
    esa, ksa = load_config(configs[0]), load_config(configs[1])
    other = ksa.model_copy(update={"method": ksa.method.model_copy(update={"teachers": 5})})
    with pytest.raises(sweep.SweepError, match="teachers, shots"):
        sweep.check_configs([esa, other])
    for change in ({"sampling_rate": 0.5}, {"private_demonstrations": "nearest"}):  # the teachers' samples differ
        other = ksa.model_copy(update={"method": ksa.method.model_copy(update=change)})
        with pytest.raises(sweep.SweepError, match="sampling_rate or private_demonstrations"):
            sweep.check_configs([esa, other])
    mozo = Config.model_validate({"name": "m", "private_dataset": "tiny", "backlog": "tiny-backlog",
                                  "data": esa.model_dump()["data"], "method": {"name": "dps-mozo"}})
    with pytest.raises(sweep.SweepError, match="token_level"):
        sweep.check_configs([mozo])
    with pytest.raises(sweep.SweepError, match="at least one"):
        sweep.check_configs([])
    sga, ksa_public = load_config(configs[3]), load_config(configs[4])
    nearest = sga.model_copy(update={"method": sga.method.model_copy(update={"public_demonstrations": "nearest"})})
    with pytest.raises(sweep.SweepError, match="public_demonstrations"):
        sweep.check_configs([nearest, ksa_public])


def test_a_sweep_shows_the_public_teachers_the_nearest_public_records_as_the_pipeline_does(sweep_env):
    from tests.pipeline.fakes import FakeBackend, FakeEncoder

    configs, _ = sweep_env
    sga = load_config(configs[3])
    cfg = sga.model_copy(update={"method": sga.method.model_copy(update={"public_demonstrations": "nearest"})})
    data = sweep.load_benchmark([cfg], N_QUERIES)
    ens = sweep.build_ensemble([cfg], data, FakeBackend(), lambda c: FakeEncoder(), np.random.default_rng(0))
    public = data[1]
    encoder = FakeEncoder()
    for query, features in zip(ens.queries, ens.features):
        nearest = int(np.argmax(encoder.encode([i for i, _ in public]) @ encoder.encode([query])[0]))
        assert features["public_example"] == cfg.task.demo_template.format(input=public[nearest][0],
                                                                           output=public[nearest][1])


def test_a_sweep_with_public_fewshot_scores_that_prompt_apart_and_gives_its_answer_to_sga(sweep_env):
    from dpicl.prompts import render_prompt
    from tests.pipeline.fakes import FakeBackend, FakeEncoder

    configs, _ = sweep_env
    sga = load_config(configs[3])
    cfg = sga.model_copy(update={"method": sga.method.model_copy(update={"public_demonstrations": "nearest",
                                                                          "public_fewshot": 3})})
    with pytest.raises(sweep.SweepError, match="public_fewshot"):
        sweep.check_configs([cfg, sga.model_copy(update={"method": sga.method.model_copy(
            update={"public_demonstrations": "nearest"})})])
    data = sweep.load_benchmark([cfg], N_QUERIES)
    ens = sweep.build_ensemble([cfg], data, FakeBackend(), lambda c: FakeEncoder(), np.random.default_rng(0))
    public, encoder = data[1], FakeEncoder()
    assert [len(a) for a in ens.answers["public few-shot"]] == [4] * N_QUERIES  # the teachers only
    for query, answer, features in zip(ens.queries, ens.answers["public 3-shot"], ens.features):
        order = np.argsort(-(encoder.encode([i for i, _ in public]) @ encoder.encode([query])[0]))[:3]
        assert answer == _fake_greedy(render_prompt(cfg.task, [public[i] for i in reversed(order)], query))
        assert features["public_outputs"][-1] == answer and len(features["public_outputs"]) == 5
        assert features["public_texts"][-1] == answer and len(features["public"]) == 5  # a candidate of SGA


def test_a_sweep_answers_each_embedded_public_text_set_by_its_own_consensus_for_free(sweep_env):
    """SGA's public outputs and ESA's zero-shot candidates, each set answered by the text nearest the others: free
    baselines ("public consensus", "zero-shot consensus"), counted as such when DP rows are compared."""
    from dpicl.embeddings.candidates import consensus
    from dpicl.evaluation.report import free_baselines_ahead
    from tests.pipeline.fakes import FakeBackend, FakeEncoder

    configs, _ = sweep_env
    for path, name, texts, vectors in ((configs[3], "public consensus", "public_texts", "public"),
                                       (configs[0], "zero-shot consensus", "candidate_texts", "candidates")):
        cfg = load_config(path)
        data = sweep.load_benchmark([cfg], N_QUERIES)
        ens = sweep.build_ensemble([cfg], data, FakeBackend(), lambda c: FakeEncoder(), np.random.default_rng(0))
        assert len(ens.answers[name]) == N_QUERIES
        for answer, features in zip(ens.answers[name], ens.features):
            assert answer == features[texts][consensus(features[vectors])]
            assert answer in features[texts]
    rows = [{"setting": s, "method": m, "epsilon": e, "repetition": 0, "metric": "rougeL", "value": v}
            for s, m, e, v in (("zero-shot consensus", None, None, 30.0), ("esa ε=1", "esa", 1.0, 25.0))]
    assert free_baselines_ahead(summarize(rows)) == ["esa ε=1: rougeL 25.00 < zero-shot consensus 30.00"]


def test_unknown_metrics_are_refused_before_any_model_runs(sweep_env):
    configs, _ = sweep_env
    cfg = load_config(configs[0])
    with pytest.raises(ValueError, match="rougeL"):
        sweep.unavailable_metrics(cfg, ["rouge-l"])
    assert sweep.default_metrics(cfg) == ["rouge1", "rouge2", "rougeL"]


def test_noiseless_aggregates_are_the_exact_ones():
    cfg = Config.model_validate({"name": "x", "private_dataset": "p", "backlog": "b",
                                 "method": {"name": "ksa-jem", "k": 2}})
    rng = np.random.default_rng(0)
    teachers = ["apple banana cherry", "banana cherry", "cherry date"]
    got = sweep.nonprivate(cfg, {"teacher_outputs": teachers, "zero_shot": "apple banana cherry date"}, rng)
    assert got["keywords"] == ["cherry", "banana"]  # counts 3 and 2, ties broken by domain order
    esa = cfg.model_copy(update={"method": Config.model_validate(
        {"name": "x", "private_dataset": "p", "backlog": "b"}).method})
    vectors = rng.normal(size=(4, 3))
    assert np.allclose(sweep.nonprivate(esa, {"teachers": vectors}, rng), vectors.mean(axis=0))


def test_summary_of_one_repetition_has_no_spread_and_the_table_lists_every_setting():
    rows = [{"setting": s, "method": m, "epsilon": e, "repetition": 0, "metric": "accuracy", "value": v}
            for s, m, e, v in (("zero-shot", None, None, 50.0), ("rnm ε=1", "rnm", 1.0, 60.0))]
    summary = summarize(rows)
    assert [s["metrics"]["accuracy"] for s in summary] == [{"mean": 50.0, "std": 0.0, "n": 1},
                                                           {"mean": 60.0, "std": 0.0, "n": 1}]
    table = markdown_table(summary)
    assert "| zero-shot | 50.00 |" in table and "| rnm ε=1 | 60.00 |" in table and "±" not in table


def test_classification_sweep_scores_accuracy_of_labels(tmp_path):
    from tests.pipeline.fakes import FakeBackend, FakeEncoder

    labels = ["alpha", "beta", "gamma"]
    private = write_jsonl(tmp_path / "p.jsonl", [{"id": f"r{i}", "text": f"record {i}", "label": labels[i % 3]}
                                                for i in range(30)])
    backlog = write_jsonl(tmp_path / "q.jsonl", [{"id": f"q{i}", "text": f"query {i}", "label": labels[i % 3]}
                                                for i in range(9)])
    cfg = Config.model_validate({
        "name": "cls", "private_dataset": "p", "backlog": "q",
        "task": {"type": "classification", "demo_template": "Text: {input}\nLabel: {output}",
                 "query_template": "Text: {input}\nLabel:", "labels": labels},
        "method": {"name": "rnm", "teachers": 5, "shots": 1},
        "data": [{"name": "p", "kind": "private", "path": str(private), "task": "classification",
                  "fields": {"id": "id", "input": "text", "output": "label"}},
                 {"name": "q", "kind": "queries", "path": str(backlog),
                  "fields": {"id": "id", "input": "text", "output": None, "reference": "label"}}]})
    rng = np.random.default_rng(1)
    data = sweep.load_benchmark([cfg], 9)
    ens = sweep.build_ensemble([cfg], data, FakeBackend(), lambda c: FakeEncoder(), rng)
    assert len(ens.answers["few-shot"]) == 9 and all(len(a) == 5 for a in ens.answers["few-shot"])
    answers, passed = sweep.method_answers(cfg, ens, sweep.INF, FakeBackend(), rng)
    votes = [np.bincount([labels.index(a) for a in teacher], minlength=3) for teacher in ens.answers["few-shot"]]
    assert answers[""] == [labels[int(np.argmax(v))] for v in votes] and passed is None
    noisy, _ = sweep.method_answers(cfg, ens, 1.0, FakeBackend(), rng)
    assert set(noisy[""]) <= set(labels)
    assert sweep.score(cfg, answers[""], ens.references, None).keys() == {"accuracy"}


def test_configs_of_one_method_are_named_apart_and_must_have_names_of_their_own(sweep_env):
    configs, _ = sweep_env
    esa, ksa = load_config(configs[0]), load_config(configs[1])
    k2 = ksa.model_copy(update={"name": "tiny-ksa-jem-k2", "method": ksa.method.model_copy(update={"k": 2})})
    assert sweep.method_labels([esa, ksa, k2]) == ["esa", "ksa-jem (tiny-ksa-jem)", "ksa-jem (tiny-ksa-jem-k2)"]
    same_name = k2.model_copy(update={"name": ksa.name})
    with pytest.raises(sweep.SweepError, match="own `name:`"):
        sweep.check_configs([esa, ksa, same_name])


@pytest.mark.slow  # starts Prefect
def test_a_sweep_of_one_method_in_two_configs_keeps_their_rows_apart(sweep_env):
    """Two settings of one method (k = 10 and k = 2) used to share the row names "ksa-jem ε=…": the sweep ran to
    its end, then failed to store its rows (a duplicate key in `evaluations`), and all its work was lost."""
    from dpicl.flows.evaluate import evaluate

    configs, tmp = sweep_env
    raw = yaml.safe_load(open(configs[1]))
    raw["name"], raw["method"]["k"] = "tiny-ksa-jem-k2", 2
    k2 = tmp / "tiny-ksa-jem-k2.yaml"
    k2.write_text(yaml.safe_dump(raw))
    result = evaluate(configs=[configs[1], str(k2)], epsilons=[8.0], queries=N_QUERIES, seed=3,
                      out_dir=str(tmp / "out"), db=str(tmp / "eval.duckdb"))
    summary = {s["setting"]: s for s in result["summary"]}
    methods = {f"ksa-jem ({name}) ε={e}" for name in ("tiny-ksa-jem", "tiny-ksa-jem-k2") for e in ("8", "∞")}
    assert methods <= set(summary) and not any(s.startswith("ksa-jem ε=") for s in summary)
    assert all(summary[s]["metrics"]["rougeL"]["n"] == 1 for s in methods), "one value per setting and repetition"


@pytest.mark.slow  # starts Prefect
@pytest.mark.parametrize("where", ["db", "out_dir"])
def test_results_that_could_not_be_stored_fail_the_sweep_before_its_work(sweep_env, monkeypatch, where):
    """A database or report folder that cannot be written used to fail only after the whole sweep had run."""
    from dpicl.flows.evaluate import evaluate

    configs, tmp = sweep_env
    not_a_folder = tmp / "a-file"
    not_a_folder.write_text("")
    swept = []
    monkeypatch.setattr(sweep, "build_ensemble", lambda *args, **kwargs: swept.append(1))
    paths = {"db": str(tmp / "eval.duckdb"), "out_dir": str(tmp / "out"), where: str(not_a_folder / "x")}
    with pytest.raises(OSError):
        evaluate(configs=configs[:1], epsilons=[1.0], queries=N_QUERIES, db=paths["db"], out_dir=paths["out_dir"])
    assert not swept, "the sweep ran before finding that its results had nowhere to go"


def test_sga_scores_its_top1_release_once_when_the_config_already_selects_top1():
    """The demo's SGA selects top-1: its own row and the top-1 variant were one computation, scored twice."""
    cfg = load_config("demo")
    assert cfg.method.select == "top1"
    assert sweep._method(cfg).evaluation_variants(cfg) == {" top-1": cfg}
    llm = cfg.model_copy(update={"method": cfg.method.model_copy(update={"select": "llm"})})
    variants = sweep._method(llm).evaluation_variants(llm)
    assert variants[""] is llm and variants[" top-1"].method.select == "top1"


def test_the_report_names_the_dp_settings_a_free_answer_beats():
    from dpicl.evaluation.report import free_baselines_ahead, free_note

    def row(setting, method, epsilon, value, metric="rougeL"):
        return {"setting": setting, "method": method, "epsilon": epsilon, "repetition": 0, "metric": metric,
                "value": value}

    rows = [row("zero-shot", None, None, 20.0), row("few-shot", None, None, 40.0),  # private few-shot: not free
            row("public 4-shot", None, None, 30.0), row("sga ε=1", "sga", 1.0, 25.0),
            row("sga ε=3", "sga", 3.0, 31.0), row("sga ε=∞", "sga", sweep.INF, 10.0),
            row("ksa-ptr ε=1", "ksa-ptr", 1.0, 100.0, "ptr_passed_%")]
    assert free_baselines_ahead(summarize(rows)) == ["sga ε=1: rougeL 25.00 < public 4-shot 30.00"]
    assert free_baselines_ahead(summarize([r for r in rows if r["setting"] != "public 4-shot"])) == []
    # the report says how to release a free answer from public data at no cost; the zero-shot one needs no config
    assert "synthetic-icl" in free_note(free_baselines_ahead(summarize(rows)))
    rows.append(row("zero-shot consensus", None, None, 35.0))
    assert "synthetic-icl" not in free_note(free_baselines_ahead(summarize(rows)))


def test_a_sweep_shows_each_teacher_the_records_of_its_own_nearest_the_query_as_the_pipeline_does(sweep_env):
    from dpicl.privacy.sampling import teacher_of
    from dpicl.prompts import render_prompt
    from tests.pipeline.fakes import FakeBackend, FakeEncoder

    configs, _ = sweep_env
    esa = load_config(configs[0])
    cfg = esa.model_copy(update={"method": esa.method.model_copy(update={"private_demonstrations": "nearest",
                                                                          "sampling_rate": 1.0})})
    data = sweep.load_benchmark([cfg], N_QUERIES)
    backend, prompts = FakeBackend(), []
    generate = backend.generate
    backend.generate = lambda batch, params, progress=False: (prompts.append(list(batch)),
                                                              generate(batch, params, progress=progress))[1]
    ens = sweep.build_ensemble([cfg], data, backend, lambda c: FakeEncoder(), np.random.default_rng(0),
                               teacher_key=b"k")
    private, n, shots = data[0], cfg.method.teachers, cfg.method.shots
    encoder, buckets = FakeEncoder(), teacher_of([r.record_id for r in private], b"k", n)
    vectors = encoder.encode([r.input for r in private])
    for k, query in enumerate(ens.queries):
        similarity = vectors @ encoder.encode([query])[0]  # every record sampled (rate 1): each bucket's nearest
        for t in range(n):
            mine = sorted((i for i in range(len(private)) if buckets[i] == t), key=lambda i: similarity[i])[-shots:]
            expected = render_prompt(cfg.task, [(private[i].input, private[i].output) for i in mine], query)
            assert prompts[0][k * n + t] == expected
    # an ensemble whose teachers' records are given (the membership-inference audit) cannot honour "nearest"
    given = [[[] for _ in range(n)] for _ in ens.queries]
    with pytest.raises(sweep.SweepError, match="private_demonstrations: nearest"):
        sweep.build_ensemble([cfg], data, backend, lambda c: FakeEncoder(), np.random.default_rng(0), groups=given)
    # nor can an encoder that batches the private records: one record's score would move with its neighbours
    batching = FakeEncoder()
    batching.batch_invariant = False
    with pytest.raises(ValueError, match="batch-invariant encoder"):
        sweep.build_ensemble([cfg], data, backend, lambda c: batching, np.random.default_rng(0))
