"""Config validation and the bundled configs (their benchmark data is read from $DPICL_DATA when present)."""

from __future__ import annotations

from pathlib import Path

import pytest

from dpicl.config import CONFIG_DIR, Config, ConfigError, load_config

BASE = {"name": "x", "private_dataset": "p", "backlog": "b"}
CLASSIFY = {"type": "classification", "demo_template": "{input} -> {output}", "query_template": "{input} ->",
            "labels": ["yes", "no"]}
BUNDLED = sorted(p.stem for p in CONFIG_DIR.glob("*.yaml"))


def _invalid(path: Path, raw: str) -> str:
    path.write_text(raw)
    with pytest.raises(ConfigError) as err:
        load_config(path)
    return str(err.value)


def test_each_method_gets_its_own_settings_and_unknown_ones_are_refused(tmp_path):
    assert Config.model_validate({**BASE, "method": {"name": "ksa-ptr"}}).method.k_max == 30
    assert Config.model_validate({**BASE, "task": CLASSIFY, "method": {"name": "rnm"}}).method.name == "rnm"
    message = _invalid(tmp_path / "c.yaml", "name: x\nprivate_dataset: p\nbacklog: b\nmethod: {name: ksa-jem, k_max: 3}\n")
    assert "k_max" in message and "c.yaml" in message


def test_a_misspelt_key_is_answered_with_the_closest_one_of_its_section(tmp_path):
    """`generaton:` and `method.teacher` were both sent to `dpicl methods`; neither said what was meant."""
    message = _invalid(tmp_path / "c.yaml", "name: x\nprivate_dataset: p\nbacklog: b\ngeneraton: {}\n"
                       "generation: {max_new_token: 9}\nmethod: {name: esa, teacher: 4, zzz: 1}\n"
                       "data: [{name: d, kind: private, path: a.jsonl, feilds: {}}]\n")
    assert "generaton: not a setting here (did you mean `generation`?" in message
    assert "generation.max_new_token: not a setting here (did you mean `max_new_tokens`?" in message
    assert "method.teacher: not a setting here (did you mean `teachers`? `dpicl methods esa` explains each)" in message
    assert "method.zzz: not a setting here (a misspelling? `dpicl methods esa`" in message
    assert "data.0.feilds: not a setting here (did you mean `fields`?" in message


def test_method_and_task_must_fit(tmp_path):
    message = _invalid(tmp_path / "c.yaml", "name: x\nprivate_dataset: p\nbacklog: b\nmethod: {name: rnm}\n")
    assert "does not answer summarization" in message
    with pytest.raises(ValueError, match="at least two distinct labels"):
        Config.model_validate({**BASE, "task": {**CLASSIFY, "labels": ["yes"]}, "method": {"name": "rnm"}})
    with pytest.raises(ValueError, match="keyword_template must contain"):
        Config.model_validate({**BASE, "method": {"name": "ksa-jem", "keyword_template": "{input} only"}})
    free = {"name": "synthetic-icl", "demos_dataset": "d", "consensus": 3}
    assert Config.model_validate({**BASE, "method": free}).method.consensus == 3
    with pytest.raises(ValueError, match="consensus picks among free-text answers"):
        Config.model_validate({**BASE, "task": CLASSIFY, "method": free})


@pytest.mark.parametrize("name", BUNDLED)
def test_bundled_configs_load(name):
    cfg = load_config(name)
    assert cfg.data, f"{name} lists no data"


@pytest.mark.parametrize("name", [n for n in BUNDLED if n != "demo"])
def test_bundled_benchmark_configs_ingest_the_shared_data(name, tmp_path):
    from dpicl.storage.db import connect
    from dpicl.storage.ingest import ingest_source

    cfg = load_config(name)
    if not all(Path(s.path).is_file() for s in cfg.data):
        pytest.skip(f"benchmark data for {name} is not present ($DPICL_DATA)")
    con = connect(tmp_path / "c.duckdb")
    reports = [ingest_source(con, source) for source in cfg.data]
    assert all(r.rows_added > 100 for r in reports)
    if cfg.task.type == "classification":
        outputs = {o for (o,) in con.execute("SELECT DISTINCT output FROM records").fetchall()}
        references = {r for (r,) in con.execute("SELECT DISTINCT reference FROM queries").fetchall()}
        assert outputs == references == set(cfg.task.labels)
    con.close()


@pytest.mark.parametrize("test_mode", ["0", "1"])
def test_a_run_config_with_a_fixed_seed_is_refused_whatever_the_environment(tmp_path, monkeypatch, test_mode):
    """answer, synthesize, serve and rerun load their config through load_config: a fixed seed never reaches them,
    not even with DPICL_TEST_MODE=1 (that mode is for the privacy core's own tests)."""
    from dpicl.config import ConfigError, load_config

    monkeypatch.setenv("DPICL_TEST_MODE", test_mode)
    path = tmp_path / "seeded.yaml"
    path.write_text("name: s\nprivate_dataset: p\nbacklog: b\nseed: 7\n")
    with pytest.raises(ConfigError, match="seed"):
        load_config(path)
    path.write_text("name: s\nprivate_dataset: p\nbacklog: b\nseed: null\n")  # as runs stored it before
    assert load_config(path).name == "s"


def test_a_copied_demo_config_reads_the_same_files(tmp_path):
    copy = tmp_path / "elsewhere" / "my-demo.yaml"
    copy.parent.mkdir()
    copy.write_text((CONFIG_DIR / "demo.yaml").read_text())
    paths = [s.path for s in load_config(copy).data]
    assert paths == [s.path for s in load_config("demo").data]
    assert all(Path(p).is_file() for p in paths)


def test_data_paths_expand_variables_and_home_and_are_relative_to_the_config(tmp_path, monkeypatch):
    monkeypatch.setenv("MY_DATA", str(tmp_path / "data"))
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    monkeypatch.delenv("NOT_SET_HERE", raising=False)
    config = tmp_path / "configs" / "c.yaml"
    config.parent.mkdir()
    sources = [("a", "$MY_DATA/a.jsonl"), ("b", "~/b.jsonl"), ("c", "../c.jsonl"), ("d", "$NOT_SET_HERE/d.jsonl")]
    config.write_text("name: x\nprivate_dataset: a\nbacklog: q\ndata:\n" + "".join(
        f"  - {{name: {name}, kind: private, path: {path}, fields: {{id: id, input: text, output: out}}}}\n"
        for name, path in sources))
    assert [s.path for s in load_config(config).data] == [
        str(tmp_path / "data" / "a.jsonl"), str(tmp_path / "home" / "b.jsonl"), str(tmp_path / "c.jsonl"),
        "$NOT_SET_HERE/d.jsonl"]  # loads (plan, answer need no data files); ingesting it names the variable
    # a variable holding a relative path is relative to the current folder, as in a shell, not to the config's
    monkeypatch.setenv("MY_DATA", "rel-data")
    (tmp_path / "cwd").mkdir()
    monkeypatch.chdir(tmp_path / "cwd")
    assert load_config(config).data[0].path == str(tmp_path / "cwd" / "rel-data" / "a.jsonl")


def test_ingesting_a_path_whose_variable_is_not_set_names_the_variable(tmp_path, monkeypatch):
    from typer.testing import CliRunner

    from dpicl.cli import app

    monkeypatch.delenv("DPICL_DATA", raising=False)
    db = tmp_path / "d.duckdb"
    result = CliRunner().invoke(app, ["ingest", "--config", "sst2-rnm", "--db", str(db)])
    [line] = result.output.strip().splitlines()
    assert result.exit_code == 2 and "$DPICL_DATA, which is not set" in line, result.output
    assert not db.exists()  # a refused first ingest leaves no database


@pytest.mark.parametrize("group", [("samsum-esa-4shot", "samsum-ksa-jem-t24s4", "samsum-ksa-ptr-t24s4"),
                                   ("samsum-sga-t24s4", "samsum-ksa-public-t24s4")])
def test_benchmark_config_groups_share_one_ensemble(group):
    """benchmarks/configs/ holds the KSA and SGA copies that benchmarks/utility.py runs beside a bundled config:
    a group must agree on everything its shared teachers depend on."""
    from dpicl.evaluation import sweep

    folder = Path(__file__).resolve().parents[1] / "benchmarks" / "configs"
    configs = [load_config(folder / f"{n}.yaml" if (folder / f"{n}.yaml").is_file() else n) for n in group]
    assert sweep.check_configs(configs).method.teachers == 24


def test_gemma_sst2_config_differs_from_the_bundled_one_in_its_model_only():
    """BENCHMARKS.md compares SST-2 with SmolLM2 and Gemma: everything else must be the same."""
    folder = Path(__file__).resolve().parents[1] / "benchmarks" / "configs"
    smollm2 = load_config("sst2-rnm").model_dump()
    gemma = load_config(folder / "sst2-rnm-gemma.yaml").model_dump()
    assert (gemma["model"]["llm"], smollm2["model"]["llm"]) == ("gemma-3-270m", "smollm2")
    for cfg in (smollm2, gemma):
        cfg.pop("name")
        cfg["model"].pop("llm")
    assert gemma == smollm2
