"""benchmarks/keyword_hints.py: the oracle keywords are KSA's kind of keywords (words of the query, in the
reference's order, at most k), and an answer that only copies them back is recognised as such."""

import importlib.util
from types import SimpleNamespace
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


def test_teacher_keywords_are_ksa_jems_noise_free_choice_and_the_named_part_of_it(hints):
    cfg = SimpleNamespace(method=SimpleNamespace(k=4))
    prompt = "Dialogue:\nAnna: Station tomorrow? Ben: Yes, noon, tickets.\nSummarize the above dialogue:"
    team = ["Ben brings the tickets.", "Anna and Ben meet tomorrow with tickets.", "Ben has tickets at noon."]
    ensemble = SimpleNamespace(features=[{"zero_shot": prompt, "teacher_outputs": team}])
    ranked, named = hints.teacher_keywords(cfg, ensemble)
    # counts: tickets 3, Ben 3, then Anna, tomorrow, noon 1 each: ties in the prompt's order
    assert ranked == [["Ben", "tickets", "Anna", "tomorrow"]]
    assert named == ranked
    ensemble.features[0]["teacher_outputs"] = ["Ben brings the tickets."]
    ranked, named = hints.teacher_keywords(cfg, ensemble)
    assert ranked == [["Ben", "tickets", "Dialogue", "Anna"]]  # unnamed words fill the k places
    assert named == [["Ben", "tickets"]]


def test_overlap_is_precision_and_recall_against_the_reference_keywords(hints):
    got = hints.overlap([["anna", "Bus"], [], ["x"]], [["Anna", "Ben"], ["noon"], []])
    assert got == {"precision": round((1 / 2 + 0 + 0) / 3, 3), "recall": round((1 / 2 + 0 + 1) / 3, 3)}
