"""The sentence encoder on the embedded all-MiniLM-L6-v2."""

import numpy as np
import pytest

from dpicl.embeddings.encoder import Encoder

pytestmark = [pytest.mark.slow, pytest.mark.model]


@pytest.fixture(scope="module")
def encoder():
    return Encoder(threads=1)


def test_shape_dtype_and_unit_norm(encoder):
    texts = ["A man is playing a guitar.", "Stocks fell sharply today.", "x", ""]
    vectors = encoder.encode(texts)
    assert encoder.dim == 384
    assert vectors.shape == (4, 384) and vectors.dtype == np.float32
    np.testing.assert_allclose(np.linalg.norm(vectors, axis=1), 1.0, atol=1e-5)


def test_empty_input(encoder):
    out = encoder.encode([])
    assert out.shape == (0, 384) and out.dtype == np.float32


def test_similar_sentences_are_closer(encoder):
    a, b, c, d = encoder.encode(
        [
            "A man is playing a guitar.",
            "Someone plays the guitar.",
            "The central bank raised interest rates again.",
            "Interest rates were increased by the central bank.",
        ]
    )
    assert a @ b > a @ c and a @ b > a @ d
    assert c @ d > c @ a and c @ d > c @ b


def test_batching_does_not_change_vectors(encoder):
    texts = [f"sentence number {i} about topic {i % 3}" for i in range(7)]
    together = encoder.encode(texts)
    alone = np.stack([encoder.encode([t])[0] for t in texts])
    np.testing.assert_allclose(together, alone, atol=1e-5)


def test_rejects_bare_string(encoder):
    with pytest.raises(TypeError):
        encoder.encode("not a list")


PRIVATE = ["Anna and Ben meet at the cafe at five.", "Tom lost his keys and will call the front desk."]
# The other text of the call: short, or much longer (a longer batch, so more padding for the private texts).
OTHERS = ["x", "Mia thinks Tom left his keys at the office yesterday evening. " * 12]


def test_a_text_s_embedding_bits_do_not_depend_on_the_other_texts(encoder):
    """Privacy invariant 10: one text's vector, to the bit, whatever the other texts of the call are."""
    assert encoder.batch_invariant  # the default
    reference = encoder.encode([*PRIVATE, OTHERS[0]])[:2]
    assert encoder.encode([*PRIVATE, OTHERS[1]])[:2].tobytes() == reference.tobytes()
    assert encoder.encode([OTHERS[1], *PRIVATE])[1:].tobytes() == reference.tobytes()  # another position
    crowd = [f"extra text number {i}" for i in range(70)]  # more than one batch of `batch_size`
    assert encoder.encode([*crowd, *PRIVATE])[70:].tobytes() == reference.tobytes()
    assert encoder.encode(PRIVATE[:1]).tobytes() == reference[:1].tobytes()  # alone


def test_batched_encoding_depends_on_the_batch(encoder):
    """The inputs above are sensitive: batched (`batch_invariant=False`, the encoder's behaviour before), the
    longer other text changes the private texts' vectors in their last bits (observed: up to 1e-7)."""
    encoder.batch_invariant = False
    try:
        short, long = (encoder.encode([*PRIVATE, other])[:2] for other in OTHERS)
    finally:
        encoder.batch_invariant = True
    assert short.tobytes() != long.tobytes()
    np.testing.assert_allclose(short, long, atol=1e-5, rtol=0)  # only the last bits


def test_texts_that_may_share_batches_are_batched(encoder):
    """`batched=True` (public texts): one call is batched although the encoder is batch invariant, so the longer
    other text shows in the vectors' last bits, as above; the encoder stays invariant for the next call."""
    short, long = (encoder.encode([*PRIVATE, other], batched=True)[:2] for other in OTHERS)
    assert short.tobytes() != long.tobytes()
    np.testing.assert_allclose(short, long, atol=1e-5, rtol=0)
    assert encoder.batch_invariant
    assert encoder.encode([*PRIVATE, OTHERS[1]])[:2].tobytes() == encoder.encode([*PRIVATE, OTHERS[0]])[:2].tobytes()


def test_the_progress_bar_path_encodes_the_same_vectors(encoder, monkeypatch):
    """On a terminal the texts are encoded in chunks under our progress bar: each vector is still a function of its
    own text (batch-invariant), so the result is the one of a single call."""
    from dpicl.embeddings import encoder as encoder_module

    texts = [f"support ticket number {i} about a router" for i in range(40)]
    plain = encoder.encode(texts, progress=True)  # not a terminal here: one call
    monkeypatch.setattr(encoder_module, "shown", lambda: True)
    monkeypatch.setattr("dpicl.progress.shown", lambda: True)
    chunked = encoder.encode(texts, progress=True)
    np.testing.assert_array_equal(chunked, plain)
