"""Bad input (issue: hardening): generated malformed files for every reader, configs and command-line values.

Each must be refused with exactly one `error:` line on stderr, exit code 2, no traceback, and the database
byte-for-byte as before; a refused first ingest into a new database path leaves no file. The CLI runs in-process
(typer's CliRunner) except for a few end-to-end cases in a subprocess. The number of refusals checked is printed
at the end of the run (tests/hardening/conftest.py) and recorded in docs/RELIABILITY.md.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from typer.testing import CliRunner

from tests.hardening import strategies as bad
from tests.hardening.badinput import (
    FIELDS,
    assert_refused,
    file_hash,
    seed_database,
    write_parquet,
)


def examples(n: int):
    """Hypothesis settings: `n` examples, no deadline (each example runs a command)."""
    return settings(max_examples=n, deadline=None,
                    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])


@pytest.fixture(scope="module")
def workdir(tmp_path_factory) -> Path:
    return tmp_path_factory.mktemp("bad-input")


@pytest.fixture(scope="module")
def db(workdir) -> Path:
    """A database with data, a budget and a backlog; every test only ever fails to change it."""
    path = seed_database(workdir / "seeded.duckdb", workdir)
    rows = workdir / "other.jsonl"  # a second private dataset, without a budget (so budget open reaches the values)
    rows.write_text("".join(json.dumps({"id": f"o{i}", "input": f"other {i}", "output": f"o {i}"}) + "\n"
                            for i in range(3)), encoding="utf-8")
    from dpicl.cli import app

    result = CliRunner().invoke(app, ["ingest", str(rows), "--name", "priv2", *FIELDS, "--db", str(path)])
    assert result.exit_code == 0, result.output
    return path


def _file(workdir: Path, name: str, data: bytes) -> Path:
    path = workdir / name
    path.write_bytes(data)
    return path


def _parquet(workdir: Path, select: str, damage: bytes | None) -> Path:
    path = write_parquet(workdir / "file.parquet", select)
    if damage is not None:
        if damage.startswith(b"truncate:"):
            data = path.read_bytes()
            path.write_bytes(data[:int(damage.split(b":")[1]) % len(data)])
        else:
            path.write_bytes(damage)
    return path


# --- the findings, one by one --------------------------------------------------------------------------

@pytest.mark.parametrize(("epsilon", "delta", "says"), [
    ("inf", "1e-5", "ε must be a finite number"), ("nan", "1e-5", "ε must be a finite number"),
    ("-1", "1e-5", "ε must be greater than 0"), ("2", "1e-320", "δ must be greater than 1e-10"),
    ("2", "nan", "δ must be a finite number"), ("2", "1", "less than 1"),
])
def test_budget_open_refuses_what_no_accountant_can_check(db, epsilon, delta, says):
    line = assert_refused(["budget", "open", "priv2", "--epsilon", epsilon, "--delta", delta, "--db", str(db)],
                          db, "budget values")
    assert says in line


def test_min_delta_is_the_prv_accountants_delta_error():
    from dpicl.privacy.accounting.prv import DEFAULT_DELTA_ERROR
    from dpicl.storage.budget_limits import MIN_DELTA

    assert MIN_DELTA >= DEFAULT_DELTA_ERROR


@pytest.mark.parametrize("name", ["", "\x00", "a\x00b", "\n", "\n\n", " \t ", "line\nbreak", "\x1b[2J"])
def test_ingest_refuses_empty_blank_and_control_character_names(db, workdir, name):
    rows = _file(workdir, "ok.jsonl", b'{"id": "z", "input": "fresh", "output": "x"}\n')
    line = assert_refused(["ingest", str(rows), "--name", name, *FIELDS, "--db", str(db)], db, "names")
    assert "name" in line and "\x00" not in line and "\x1b" not in line


def test_a_csv_whose_first_line_has_a_field_over_the_csv_limit_is_refused(db, workdir):
    path = _file(workdir, "long.csv", b"id,input," + b"o" * 131_073 + b"\nn1,a,b\n")
    line = assert_refused(["ingest", str(path), "--name", "long", *FIELDS, "--db", str(db)], db, "files: csv")
    assert "line 1" in line and "131,072" in line


@pytest.mark.parametrize(("text", "says"), [
    ("- a\n- b\n", "a list"), ("42\n", "a single value"), ("", "empty"), ("just words\n", "a single value")])
def test_a_config_that_is_not_a_mapping_is_refused_naming_the_file(db, workdir, text, says):
    config = _file(workdir, "shape.yaml", text.encode())
    for command in (["ingest", "--config", str(config)], ["answer", str(config)]):
        line = assert_refused([*command, "--db", str(db)], db, "configs")
        assert str(config) in line and says in line


def test_releases_of_a_backlog_that_was_never_ingested_is_an_error(db):
    line = assert_refused(["releases", "no-such-backlog", "--db", str(db)], db, "names")
    assert "no backlog named 'no-such-backlog'" in line and "--as queries" in line


# --- generated: names, values, files, configs --------------------------------------------------------------------

def _name_commands(name: str, rows: Path, db: Path) -> list[list[str]]:
    return [["ingest", str(rows), "--name", name, "--as", "private", *FIELDS, "--db", str(db)],
            ["ingest", str(rows), "--name", name, "--as", "queries", "--field", "id=id", "--field", "input=input",
             "--db", str(db)],
            ["budget", "open", name, "--epsilon", "1", "--delta", "1e-5", "--db", str(db)],
            ["budget", "show", name, "--db", str(db)],
            ["releases", name, "--db", str(db)],
            ["plan", "--dataset", name, "--db", str(db)]]


@examples(60)
@given(name=bad.BAD_NAMES, which=st.integers(0, 5))
def test_unusable_names_are_refused_by_every_command_that_takes_one(db, workdir, name, which):
    rows = _file(workdir, "ok.jsonl", b'{"id": "z", "input": "fresh", "output": "x"}\n')
    line = assert_refused(_name_commands(name, rows, db)[which], db, "names")
    assert "name" in line


@examples(40)
@given(epsilon=bad.BAD_EPSILONS, delta=bad.BAD_DELTAS, which=st.sampled_from(["epsilon", "delta", "both"]))
def test_budget_values_out_of_range_are_refused(db, epsilon, delta, which):
    epsilon, delta = (epsilon, "1e-5") if which == "epsilon" else ("2", delta) if which == "delta" else (epsilon,
                                                                                                       delta)
    line = assert_refused(["budget", "open", "priv2", "--epsilon", epsilon, "--delta", delta, "--db", str(db)],
                          db, "budget values")
    assert "ε" in line or "δ" in line


@examples(60)
@given(data=st.data(), fmt=st.sampled_from(["json", "jsonl", "csv", "tsv"]), kind=st.sampled_from(["private",
                                                                                                   "public"]))
def test_malformed_text_files_are_refused(db, workdir, data, fmt, kind):
    if fmt in ("json", "jsonl"):
        content = data.draw(bad.bad_json_file(lines=fmt == "jsonl"))
    else:
        content = data.draw(bad.bad_csv_file("\t" if fmt == "tsv" else ","))
    path = _file(workdir, f"file.{fmt}", content)
    assert_refused(["ingest", str(path), "--name", "fresh", "--as", kind, *FIELDS, "--db", str(db)], db,
                   f"files: {fmt}")


@examples(30)
@given(spec=bad.bad_parquet(), kind=st.sampled_from(["private", "public"]))
def test_malformed_parquet_files_are_refused(db, workdir, spec, kind):
    path = _parquet(workdir, *spec)
    assert_refused(["ingest", str(path), "--name", "fresh", "--as", kind, *FIELDS, "--db", str(db)], db,
                   "files: parquet")


@examples(15)
@given(spec=bad.bad_lines())
def test_malformed_lines_files_and_patterns_are_refused(db, workdir, spec):
    content, pattern = spec
    path = _file(workdir, "file.txt", content)
    assert_refused(["ingest", str(path), "--name", "fresh", "--format", "lines", "--pattern", pattern, *FIELDS,
                    "--db", str(db)], db, "files: lines")


@examples(40)
@given(content=bad.BAD_CONFIGS, which=st.integers(0, 3))
def test_malformed_configs_are_refused_before_anything_runs(db, workdir, content, which):
    config = _file(workdir, "config.yaml", content)
    command = [["ingest", "--config"], ["answer"], ["synthesize"], ["evaluate"]][which]
    assert_refused([*command, str(config), "--db", str(db)], db, "configs")


@examples(25)
@given(data=st.data(), fmt=st.sampled_from(["jsonl", "csv", "parquet"]))
def test_a_refused_ingest_into_a_new_database_leaves_no_file(workdir, data, fmt):
    if fmt == "parquet":
        path = _parquet(workdir, *data.draw(bad.bad_parquet()))
    else:
        content = data.draw(bad.bad_json_file(lines=True) if fmt == "jsonl" else bad.bad_csv_file())
        path = _file(workdir, f"new.{fmt}", content)
    target = workdir / "never.duckdb"
    from dpicl.cli import app

    result = CliRunner().invoke(app, ["ingest", str(path), "--name", "fresh", *FIELDS, "--db", str(target)])
    assert result.exit_code == 2 and result.stderr.startswith("error: "), result.output
    assert not target.exists() and not Path(f"{target}.wal").exists()
    from tests.hardening.badinput import TRIED

    TRIED["new database"] += 1


# --- hostile command-line values -------------------------------------------------------------------------------

def _hostile(db: Path, workdir: Path) -> list[tuple[list[str], str]]:
    rows = _file(workdir, "ok.jsonl", b'{"id": "z", "input": "fresh", "output": "x"}\n')
    not_a_db = _file(workdir, "not-a-db.duckdb", b'{"id": "z"}\n')
    folder = workdir / "a-folder"
    folder.mkdir(exist_ok=True)
    traversal = "../" * 12 + "etc/passwd"
    d = ["--db", str(db)]
    return [
        (["ingest", traversal, "--name", "x", *FIELDS, *d], "format"),
        (["ingest", traversal, "--name", "x", "--format", "csv", *FIELDS, *d], "passwd"),
        (["ingest", "/dev/null", "--name", "x", "--format", "jsonl", *FIELDS, *d], "file not found"),
        (["ingest", str(rows), "--name", "x", *FIELDS, "--db", str(folder)], "cannot open the database"),
        (["ingest", str(rows), "--name", "x", *FIELDS, "--db", str(not_a_db)], "cannot open the database"),
        (["ingest", str(rows), "--name", "x", *FIELDS, "--db", "/nonexistent/dir/x.duckdb"], "cannot open"),
        (["ingest", str(rows), "--name", "x", *FIELDS, "--db", "../" * 12 + "proc/x.duckdb"], "cannot open"),
        (["ingest", "/tmp/\udcff\udcfe.jsonl", "--name", "x", *FIELDS, *d], "file not found"),
        (["ingest", "bad\x00path.jsonl", "--name", "x", *FIELDS, *d], "null byte"),
        (["budget", "open", "priv2", "--epsilon", "", "--delta", "1e-5", *d], "--epsilon"),
        (["budget", "open", "priv2", "--epsilon", "two", "--delta", "1e-5", *d], "--epsilon"),
        (["ingest", str(rows), "--name", "x", "--field", 'input=in"put', "--field", "id=id", *d], "not found"),
        (["ingest", str(rows), "--name", "x", "--format", "../../x", *FIELDS, *d], "format"),
        (["ingest", str(rows), "--name", "x", "--subset", "3:9", *FIELDS, *d], "subset"),
        (["ingest", str(rows), "--name", "x", "--subset", "x:y", *FIELDS, *d], "--subset"),
        (["ingest", str(rows), "--name", "x", "--label", "0=", *FIELDS, *d], "label"),
        (["ingest", str(rows), "--name", "priv", "--as", "public", "--replace", *FIELDS, *d], "has a privacy budget"),
        (["budget", "open", "x' OR '1'='1", "--epsilon", "1", "--delta", "1e-5", *d], "no dataset"),
        (["budget", "open", 'it"s', "--epsilon", "1e308", "--delta", "1e-5", *d], "ε"),
        (["budget", "open", "priv", "--epsilon", "5", "--delta", "1e-5", *d], "already has a budget"),
        (["budget", "open", "pub", "--epsilon", "5", "--delta", "1e-5", *d], "public"),
        (["budget", "show", "x'; DROP TABLE ledger; --", *d], "x'; DROP TABLE ledger; --"),
        (["budget", "show", "priv", "--db", str(workdir / "missing.duckdb")], "no dpicl database"),
        (["answer", "demo", "--max-queries", "-3", *d], "--max-queries"),
        (["answer", "demo", "--max-queries", "0", *d], "--max-queries"),
        (["answer", traversal, *d], "etc/passwd"),
        (["answer", "../../../../../../etc/hostname", *d], "hostname"),
        (["plan", "--dataset", "nope", *d], "nope"),
        (["serve", traversal, "--db", str(db)], "etc/passwd"),
        (["serve", "--host", "0.0.0.0", "--db", str(db)], "loopback"),
        (["serve", "--host", "192.0.2.1", "--db", str(db)], "loopback"),
    ]


def test_hostile_command_line_values_are_refused(db, workdir):
    cases = _hostile(db, workdir)
    not_a_db = workdir / "not-a-db.duckdb"
    before = file_hash(not_a_db)
    for args, says in cases:
        line = assert_refused(args, db, "command-line values")
        assert says in line, (args, line)
    assert file_hash(not_a_db) == before  # a file that is not a database is never written to
    assert not (workdir / "missing.duckdb").exists() and not Path("/nonexistent").exists()


def test_errors_name_file_row_and_field_never_a_value(db, workdir):
    secret = "canary-7f3a-private-value"
    rows = [{"id": "a", "input": "x", "output": "y"}, {"id": "b", "input": secret, "output": 42}]
    path = _file(workdir, "canary.jsonl", "".join(json.dumps(r) + "\n" for r in rows).encode())
    line = assert_refused(["ingest", str(path), "--name", "fresh", *FIELDS, "--db", str(db)], db, "files: jsonl")
    assert "row 2" in line and "output" in line and secret not in line and "42" not in line


# --- sanity: the uncorrupted bases are accepted (so refusals above are due to the corruptions) ------------------

def test_the_uncorrupted_files_are_accepted(db, workdir):
    from dpicl.cli import app

    scratch = workdir / "scratch.duckdb"
    shutil.copy(db, scratch)
    text = "".join(json.dumps(r) + "\n" for r in bad.BASE)
    files = {
        "jsonl": _file(workdir, "base.jsonl", text.encode()),
        "json": _file(workdir, "base.json", json.dumps(bad.BASE).encode()),
        "csv": _file(workdir, "base.csv", bad._csv([["id", "input", "output"]] + [list(r.values()) for r in bad.BASE],
                                                   ",")),
        "tsv": _file(workdir, "base.tsv", bad._csv([["id", "input", "output"]] + [list(r.values()) for r in bad.BASE],
                                                   "\t")),
        "parquet": write_parquet(workdir / "base.parquet", "SELECT 'n' || i AS id, 'new ticket ' || i AS input, "
                                                           "'new summary ' || i AS output FROM range(5) t(i)"),
    }
    for i, (fmt, path) in enumerate(files.items()):
        for kind in ("private", "queries"):  # a private dataset repeats nothing; a backlog is never compared
            result = CliRunner().invoke(app, ["ingest", str(path), "--name", f"ok-{fmt}-{kind}", "--as", kind,
                                              *FIELDS, "--distinct-from-existing" if kind == "private" else "--replace",
                                              "--db", str(scratch)])
            assert result.exit_code == 0, (fmt, kind, result.output)
    lines = _file(workdir, "base.txt", "".join(f"{r['id']}\t{r['input']}\t{r['output']}\n"
                                               for r in bad.BASE).encode())
    result = CliRunner().invoke(app, ["ingest", str(lines), "--name", "ok-lines", "--format", "lines", "--pattern",
                                      bad.PATTERN, "--as", "queries", *FIELDS, "--db", str(scratch)])
    assert result.exit_code == 0, result.output
    assert i == 4


# --- end to end, in a subprocess -------------------------------------------------------------------------------

def test_the_installed_command_prints_one_error_line_and_leaves_the_database_as_it_was(db, workdir):
    dpicl = str(Path(sys.executable).with_name("dpicl"))
    config = _file(workdir, "list.yaml", b"- one\n- two\n")
    long_csv = _file(workdir, "e2e-long.csv", b"id,input," + b"o" * 140_000 + b"\nn1,a,b\n")
    cases = [["budget", "open", "priv2", "--epsilon", "inf", "--delta", "1e-5"],
             ["budget", "open", "priv2", "--epsilon", "1", "--delta", "1e-320"],
             ["ingest", str(long_csv), "--name", "long", *FIELDS],
             ["ingest", str(long_csv), "--name", "\n", *FIELDS],
             ["ingest", "--config", str(config)]]
    before = file_hash(db)
    for args in cases:
        done = subprocess.run([dpicl, *args, "--db", str(db)], capture_output=True, text=True, timeout=120, check=False,
                              cwd=workdir)
        lines = [line for line in done.stderr.splitlines() if line.strip()]
        assert done.returncode == 2 and len(lines) == 1 and lines[0].startswith("error: "), (args, done.stderr)
        assert "Traceback" not in done.stderr + done.stdout and done.stdout == ""
        assert file_hash(db) == before
    from tests.hardening.badinput import TRIED

    TRIED["end to end"] += len(cases)


@pytest.mark.parametrize("name", ["", "\n", "demos\x00", " demos"])
def test_a_synthetic_dataset_name_is_checked_before_anything_is_paid(name):
    from dpicl.storage.db import connect
    from dpicl.storage.synthetic import SyntheticDatasetError, check_new_dataset

    con = connect(":memory:")
    try:
        with pytest.raises(SyntheticDatasetError, match="synthetic.name"):
            check_new_dataset(con, name)
        check_new_dataset(con, "demos")  # a usable name that is free passes
    finally:
        con.close()
