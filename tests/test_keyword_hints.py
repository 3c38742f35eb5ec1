"""benchmarks/keyword_hints.py: the oracle keywords are KSA's kind of keywords (words of the query, in the
reference's order, at most k), and an answer that only copies them back is recognised as such."""

import importlib.util
from pathlib import Path

import pytest

SCRIPT = Path(__file__).resolve().parents[1] / "benchmarks" / "keyword_hints.py"


@pytest.fixture(scope="module")
def hints():
    spec = importlib.util.spec_from_file_location("keyword_hints", SCRIPT)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_oracle_keywords_come_from_the_query_in_the_references_order(hints):
    query = "Anna: Are we meeting at the station tomorrow? Ben: Yes, at noon, bring the tickets."
    reference = "Anna and Ben will meet at the airport at noon tomorrow; Ben has the tickets."
    assert hints.oracle_keywords(query, reference, 10) == ["Anna", "Ben", "noon", "tomorrow", "tickets"]
    assert hints.oracle_keywords(query, reference, 2) == ["Anna", "Ben"]


@pytest.mark.parametrize("answer, copied", [("[Anna, Ben, noon]", True), ("Anna, Ben, noon", True),
                                             ("Anna and Ben meet at noon.", False), ("[Anna, Ben]", False)])
def test_an_answer_that_copies_the_list_counts_as_echoed(hints, answer, copied):
    assert hints.echoed(answer, ["Anna", "Ben", "noon"]) is copied
