"""Generation parameters, output post-processing and backend selection (no model needed)."""

import pytest

from dpicl.inference import BACKENDS, GenerationParams, load_backend, postprocess
from dpicl.inference.base import (
    CAPABILITIES,
    Backend,
    LabelScorer,
    UnsupportedCapabilityError,
    has_stop,
    require,
    supports,
    whole_sentences,
)


@pytest.mark.parametrize(
    ("text", "stop", "expected"),
    [
        ("\n\nParis is the capital.\nNext line", ("\n",), "Paris is the capital."),
        ("  \n \t Paris", ("\n",), "Paris"),
        ("Answer: yes. Dialogue: more", ("Dialogue:", "\n"), "Answer: yes."),
        ("one\ntwo###three", ("###", "\n"), "one"),  # earliest stop wins, not first listed
        ("one###two\nthree", ("\n", "###"), "one"),
        ("no stop here  ", ("\n",), "no stop here"),
        ("\n\n  plain text \n", (), "plain text"),
        ("###starts with stop", ("###",), ""),
        ("", ("\n",), ""),
        ("\n\n\n", ("\n",), ""),
    ],
)
def test_postprocess(text, stop, expected):
    assert postprocess(text, stop) == expected


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        # the last complete sentence is where it ends; dots inside a version or before a letter are not ends
        ("The app 7.3.0 crashes. They want a fix for the Paren", "The app 7.3.0 crashes."),
        ("Refund asked (twice). Also asks whether the", "Refund asked (twice)."),
        ('He said "stop now!" Then the', 'He said "stop now!"'),
        # one sentence cut off: its possibly cut last word and the words a sentence cannot end on go
        ("Customer reports the app crashes when opening the Paren", "Customer reports the app crashes when opening."),
        ("Customer asks to update the address, and the", "Customer asks to update the address."),
        # a sentence too short to stand alone ("Hi.") is not where it ends
        ("Hi. Customer asks for a refund of", "Hi. Customer asks for a refund."),
        ("Already whole.", "Already whole."),
        ("1. Apples and", "1. Apples."),
        ("1. Ap", "1."),
        ("the of", "the of"),  # nothing would be left: kept as it is rather than emptied
    ],
)
def test_whole_sentences(text, expected):
    assert whole_sentences(text) == expected


def test_only_a_truncated_completion_is_cut_at_a_sentence():
    cut_off = "Paris is the capital. It has a"
    assert postprocess(cut_off, ("\n",)) == cut_off  # ended by EOS: the model chose to end there
    assert postprocess(cut_off, ("\n",), truncated=True) == "Paris is the capital."
    # a stop string ended it, whatever the token count: not truncated
    assert postprocess("Paris is the capital. It has a\nmore", ("\n",), truncated=True) == cut_off


def test_has_stop_ignores_leading_whitespace():
    assert not has_stop("\n\n", ("\n",))
    assert not has_stop("\n  Paris", ("\n",))
    assert has_stop("\n  Paris\n", ("\n",))
    assert has_stop("a. b", ("x", "."))
    assert not has_stop("anything", ())


def test_generation_params_defaults_are_greedy():
    params = GenerationParams()
    assert params.greedy and params.max_new_tokens == 64 and params.stop == () and params.seed is None
    assert not GenerationParams(temperature=0.7).greedy


def test_generation_params_list_stop_becomes_tuple():
    params = GenerationParams(stop=["\n", "###"])
    assert params.stop == ("\n", "###")
    hash(params)  # frozen and hashable


@pytest.mark.parametrize(
    "kwargs",
    [
        {"max_new_tokens": 0},
        {"max_new_tokens": -3},
        {"temperature": -0.1},
        {"temperature": float("nan")},
        {"top_p": 0.0},
        {"top_p": 1.5},
        {"stop": ("",)},
    ],
)
def test_generation_params_rejects_bad_values(kwargs):
    with pytest.raises(ValueError):
        GenerationParams(**kwargs)


@pytest.mark.parametrize(
    "kwargs", [{"max_new_tokens": 2.5}, {"max_new_tokens": True}, {"stop": "\n"}, {"seed": 1.0}]
)
def test_generation_params_rejects_bad_types(kwargs):
    with pytest.raises(TypeError):
        GenerationParams(**kwargs)


def test_load_backend_unknown_name_lists_available():
    with pytest.raises(ValueError) as err:
        load_backend("nope")
    assert all(name in str(err.value) for name in BACKENDS)


class _GenerateOnly:
    name = "fake"

    def generate(self, prompts, params, *, progress=False):
        return ["" for _ in prompts]

    def close(self):
        pass


class _Scoring(_GenerateOnly):
    def label_logprobs(self, prompts, continuations, *, progress=False, variants=1):
        import numpy as np

        return np.zeros((len(prompts), len(continuations)))


def test_label_logprobs_is_an_optional_capability():
    plain, scoring = _GenerateOnly(), _Scoring()
    assert isinstance(plain, Backend) and isinstance(scoring, Backend)
    assert "label_logprobs" in CAPABILITIES
    assert not supports(plain, "label_logprobs") and not isinstance(plain, LabelScorer)
    assert supports(scoring, "label_logprobs") and isinstance(scoring, LabelScorer)
    require(scoring, "label_logprobs")
    with pytest.raises(UnsupportedCapabilityError) as err:
        require(plain, "label_logprobs")
    assert "'fake'" in str(err.value) and "label_logprobs" in str(err.value) and "classification" in str(err.value)
    assert isinstance(err.value, TypeError)


def test_supports_rejects_unknown_capability():
    with pytest.raises(ValueError, match="label_logprobs"):
        supports(_Scoring(), "logprobs")


def test_non_callable_attribute_is_not_a_capability():
    backend = _GenerateOnly()
    backend.label_logprobs = None
    assert not supports(backend, "label_logprobs")
