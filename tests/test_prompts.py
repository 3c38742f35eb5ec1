"""KSA's keyword prompt: a template the config gives, or, by default, the task's own query prompt with the
keywords on a line before its answer cue."""

import pytest

from dpicl.config import TaskConfig
from dpicl.prompts import keyword_demonstrations, keyword_prompt, zero_shot_prompt

TICKETS = TaskConfig(type="summarization", instruction="Summarize each ticket in one line.",
                     demo_template="Ticket:\n{input}\nSummary: {output}", query_template="Ticket:\n{input}\nSummary:")


def test_the_default_keyword_prompt_is_the_zero_shot_prompt_with_a_keywords_line_before_the_cue():
    prompt = keyword_prompt(TICKETS, None, "router broken", ["router", "refund"])
    zero_shot = zero_shot_prompt(TICKETS, "router broken")
    assert prompt == zero_shot.replace("\nSummary:", "\nKeywords: router, refund\nSummary:")
    assert prompt.endswith("Summary:")  # the answer cue stays last: the model answers, it does not list words


def test_the_default_puts_a_public_example_first_and_a_one_line_template_after_the_keywords():
    with_example = keyword_prompt(TICKETS, None, "q", ["k"], example="Ticket:\nold\nSummary: done")
    assert with_example.split("\n\n")[1:] == ["Ticket:\nold\nSummary: done", "Ticket:\nq\nKeywords: k\nSummary:"]
    one_line = TaskConfig(type="summarization", demo_template="{input} => {output}", query_template="{input} =>")
    assert keyword_prompt(one_line, None, "q", ["a", "b"]) == "Keywords: a, b\nq =>"


def test_keyword_demonstrations_show_each_public_record_with_the_keywords_of_its_own_output():
    demos = [("printer jams daily", "The printer jams and the customer wants a technician."),
             ("refund please", "Customer asks for a refund of order 12.")]
    shown = keyword_demonstrations(TICKETS, demos, k=3).split("\n\n")
    assert shown == [
        "Ticket:\nprinter jams daily\nKeywords: printer, jams, customer\n"
        "Summary: The printer jams and the customer wants a technician.",
        "Ticket:\nrefund please\nKeywords: Customer, asks, refund\nSummary: Customer asks for a refund of order 12.",
    ]
    # the query of the keyword prompt gets its hints on the same line as the demonstrations got theirs
    prompt = keyword_prompt(TICKETS, None, "q", ["a"], example="\n\n".join(shown))
    assert prompt.split("\n\n")[-1] == "Ticket:\nq\nKeywords: a\nSummary:"
    one_line = TaskConfig(type="summarization", demo_template="{input} => {output}", query_template="{input} =>")
    assert keyword_demonstrations(one_line, [("x", "red apples")], k=5) == "Keywords: red, apples\nx => red apples"


def test_a_configured_template_is_used_as_given():
    assert keyword_prompt(TICKETS, "{input} with [{keywords}]:", "q", ["a"]).endswith("q with [a]:")


@pytest.mark.parametrize("method", ["ksa-jem", "ksa-ptr"])
def test_ksa_defaults_to_the_task_prompt(method):
    from dpicl.config import Config

    cfg = Config.model_validate({"name": "t", "private_dataset": "p", "backlog": "b", "method": {"name": method}})
    assert cfg.method.keyword_template is None


@pytest.mark.parametrize(("teachers", "shots", "records"), [(4, 2, 30), (10, 1, 100), (3, 4, 5)])
def test_nearest_public_teachers_each_show_one_of_the_nearest_records_last(teachers, shots, records):
    from dpicl.prompts import nearest_teacher_groups, public_ensemble

    ranked = list(range(records))[::-1]  # record records-1 is the most similar
    groups = nearest_teacher_groups(ranked, teachers, shots)
    shown = [i for g in groups for i in g]
    assert len(groups) == teachers and len(shown) == len(set(shown)) == min(records, teachers * shots)
    assert set(shown) == set(ranked[:teachers * shots])  # the nearest ones, no others
    assert [g[-1] for g in groups if g] == ranked[:min(teachers, records)]  # each teacher's nearest shown last
    task = TaskConfig(type="summarization")
    pairs = [(f"in {i}", f"out {i}") for i in range(records)]
    prompts, example = public_ensemble(task, pairs, "the query", teachers, shots, "key", ranked)
    assert example == task.demo_template.format(input=f"in {ranked[0]}", output=f"out {ranked[0]}")
    assert all(p.endswith(task.query_template.format(input="the query")) for p in prompts)


@pytest.mark.parametrize(("teachers", "shots", "fewshot"), [(4, 1, 4), (3, 2, 9)])
def test_the_public_fewshot_prompt_follows_the_teachers_with_the_nearest_records_nearest_last(teachers, shots,
                                                                                           fewshot):
    from dpicl.prompts import public_ensemble, render_prompt

    task = TaskConfig(type="summarization")
    pairs = [(f"in {i}", f"out {i}") for i in range(20)]
    ranked = [7, 3, 19, 0, 12, 5, 8, 1, 2, 4, 6, 9, 10]
    teachers_only, _ = public_ensemble(task, pairs, "q", teachers, shots, "key", ranked)
    prompts, _ = public_ensemble(task, pairs, "q", teachers, shots, "key", ranked, fewshot)
    assert prompts[:teachers] == teachers_only  # the teachers' prompts are unchanged
    assert prompts[teachers:] == [render_prompt(task, [pairs[i] for i in reversed(ranked[:fewshot])], "q")]
    with pytest.raises(ValueError, match="most similar"):
        public_ensemble(task, pairs, "q", teachers, shots, "key", None, fewshot)


def test_public_fewshot_needs_the_nearest_public_demonstrations():
    from pydantic import ValidationError

    from dpicl.methods.sga import SGASettings

    with pytest.raises(ValidationError, match="public_demonstrations: nearest"):
        SGASettings(public_fewshot=4)
    settings = SGASettings(teachers=3, shots=1, public_fewshot=4, public_demonstrations="nearest")
    assert settings.public_ranked_count == 4
    assert settings.model_copy(update={"public_fewshot": 2}).public_ranked_count == 3


def test_a_configured_template_shows_every_public_fewshot_record_not_only_the_one_shot_example():
    """With `public_fewshot` a configured `keyword_template`'s {example} is the few-shot prompt's records, as the
    task shows demonstrations (no Keywords lines: the template may have none); before, only the one-shot example."""
    from types import SimpleNamespace

    from dpicl.methods.keyword_hints import KeywordMethod

    demos = [("printer jams daily", "Printer jams."), ("refund please", "Refund asked.")]
    public = {"public_example": "Ticket:\nonly one\nSummary: one", "public_demos": demos}
    custom = SimpleNamespace(task=TICKETS, method=SimpleNamespace(keyword_template="{example}\n{input} [{keywords}]",
                                                                  k=3))
    example = KeywordMethod._example(custom, public)
    assert example.split("\n\n") == ["Ticket:\nprinter jams daily\nSummary: Printer jams.",
                                     "Ticket:\nrefund please\nSummary: Refund asked."]
    default = SimpleNamespace(task=TICKETS, method=SimpleNamespace(keyword_template=None, k=3))
    annotated = KeywordMethod._example(default, public).split("\n\n")  # the default prompt: each with its keywords
    assert [block.split("\n")[1] for block in annotated] == ["printer jams daily", "refund please"]
    assert all(block.split("\n")[2].startswith("Keywords: ") for block in annotated)
    assert KeywordMethod._example(custom, {"public_example": "Ticket:\nonly one\nSummary: one"}) == \
        "Ticket:\nonly one\nSummary: one"


def test_free_icl_draws_its_one_shot_prompts_apart_from_its_few_shot_draw_which_stays_as_before():
    from dpicl.prompts import icl_groups, public_teacher_groups

    assert icl_groups(50, 4, "ds\0q1") == public_teacher_groups(50, 1, 4, "ds\0q1")  # earlier runs' prompts
    *single, fewshot = icl_groups(50, 4, "ds\0q1", consensus=6)
    assert fewshot == icl_groups(50, 4, "ds\0q1")[0] and len(single) == 6 and all(len(g) == 1 for g in single)
    assert len({i for (i,) in single}) == 6  # six different records
    assert icl_groups(50, 4, "ds\0q2", consensus=6) != icl_groups(50, 4, "ds\0q1", consensus=6)  # drawn per query


def test_free_icl_with_the_nearest_records_shows_them_nearest_last():
    from dpicl.prompts import icl_groups

    ranked = [7, 3, 19, 0, 12, 5]
    assert icl_groups(20, 4, "key", ranked) == [[0, 19, 3, 7]]
    assert icl_groups(20, 2, "key", ranked, consensus=5) == [[7], [3], [19], [0], [12], [3, 7]]
