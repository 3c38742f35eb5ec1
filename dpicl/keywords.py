"""Words of a text for keyword-space aggregation (KSA, paper 001 §3.2.2; MECHANISMS §3 steps 1–3, §4 step 1).

The reference code uses `nltk.word_tokenize` and NLTK's English stop-word list; both need NLTK data packages
that are downloaded at run time, which we never do. We use NLTK's own word tokenizer (the one `word_tokenize`
applies after its sentence splitter) on sentences split by a regular expression, and ship NLTK's stop-word
list. Stop words are matched case-insensitively (the reference code kept "I" and "The" as keywords).

Counting (at most once per teacher output, on a public or a data-dependent domain) belongs to the privacy
mechanisms (`dpicl.privacy.mechanisms.joint_em`, `ksa_ptr`); this module only turns one text into its words.
"""

from __future__ import annotations

import functools
import re
import string

# NLTK 3.x `stopwords.words("english")` (179 words).
STOPWORDS = frozenset("""
i me my myself we our ours ourselves you you're you've you'll you'd your yours yourself yourselves he him his
himself she she's her hers herself it it's its itself they them their theirs themselves what which who whom this
that that'll these those am is are was were be been being have has had having do does did doing a an the and but
if or because as until while of at by for with about against between into through during before after above below
to from up down in out on off over under again further then once here there when where why how all any both each
few more most other some such no nor not only own same so than too very s t can will just don don't should
should've now d ll m o re ve y ain aren aren't couldn couldn't didn didn't doesn doesn't hadn hadn't hasn hasn't
haven haven't isn isn't ma mightn mightn't mustn mustn't needn needn't shan shan't shouldn shouldn't wasn wasn't
weren weren't won won't wouldn wouldn't
""".split())

# the pieces NLTK's tokenizer splits contractions into ("isn't" -> "is", "n't")
CONTRACTIONS = frozenset({"n't", "'s", "'re", "'ve", "'ll", "'d", "'m"})

_SENTENCE_END = re.compile(r"(?<=[.!?])\s+")
_PUNCTUATION = frozenset(string.punctuation)


@functools.lru_cache(maxsize=1)
def _tokenizer():
    from nltk.tokenize import NLTKWordTokenizer

    return NLTKWordTokenizer()


def words(text: str) -> list[str]:
    """Word tokens of ``text`` in order, punctuation included (NLTK's word tokenizer, per sentence)."""
    tok = _tokenizer()
    return [w for sentence in _SENTENCE_END.split(text) for w in tok.tokenize(sentence)]


def is_keyword(token: str) -> bool:
    """Not made only of punctuation, not a stop word, not a piece of a contraction."""
    lowered = token.lower()
    return not all(ch in _PUNCTUATION for ch in token) and lowered not in STOPWORDS and lowered not in CONTRACTIONS


def keywords(text: str) -> list[str]:
    """The distinct keywords of ``text`` in order of first appearance."""
    return list(dict.fromkeys(w for w in words(text) if is_keyword(w)))
