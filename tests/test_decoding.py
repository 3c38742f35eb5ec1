"""The token-level decoding loop ends where the released text should: EOS, a stop string, or the token limit, and
a text the limit cut ends at a sentence boundary."""

from dpicl.decoding import _decode_loop


class WordBackend:
    """Token i is the i-th word; token 0 is EOS."""

    eos_token_ids = frozenset({0})
    words = ["<eos>", "The refund", "asked.", "Customer", "wants", "the", "router", "\n"]

    def decode(self, tokens):
        return " ".join(self.words[t] for t in tokens)


def run(tokens, max_new_tokens, stop=()):
    stream = iter(tokens)
    return _decode_loop(WordBackend(), max_new_tokens, stop, lambda suffix: next(stream))


def test_the_token_limit_ends_the_text_at_a_sentence_boundary():
    text, tokens, steps = run([1, 2, 3, 4, 5, 6], max_new_tokens=5)
    assert steps == 5 and tokens == [1, 2, 3, 4, 5]
    assert text == "The refund asked."  # not "The refund asked. Customer wants the"


def test_a_text_that_ends_by_itself_is_kept_whole():
    assert run([3, 4, 6, 0], max_new_tokens=5)[0] == "Customer wants router"  # EOS at the 4th step
    assert run([3, 4, 6, 7, 1], max_new_tokens=5, stop=("\n",))[0] == "Customer wants router"
