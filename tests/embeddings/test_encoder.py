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
