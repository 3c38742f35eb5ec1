"""KSA's keyword prompt: a template the config gives, or, by default, the task's own query prompt with the
keywords on a line before its answer cue."""

import pytest

from dpicl.config import TaskConfig
from dpicl.prompts import keyword_prompt, zero_shot_prompt

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


def test_a_configured_template_is_used_as_given():
    assert keyword_prompt(TICKETS, "{input} with [{keywords}]:", "q", ["a"]).endswith("q with [a]:")


@pytest.mark.parametrize("method", ["ksa-jem", "ksa-ptr"])
def test_ksa_defaults_to_the_task_prompt(method):
    from dpicl.config import Config

    cfg = Config.model_validate({"name": "t", "private_dataset": "p", "backlog": "b", "method": {"name": method}})
    assert cfg.method.keyword_template is None
