"""Sentence embeddings of texts (teacher outputs, candidates) with a local sentence-transformers model.

The embedded default is all-MiniLM-L6-v2 (384-d), loaded offline from its PyPI package. Vectors come back
unit-normalized, so inner product is cosine similarity (what the FAISS candidate search relies on).
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from dpicl.inference.models import resolve_encoder


class Encoder:
    """Encodes batches of texts into float32 unit vectors (n × dim).

    `threads` sets torch's intra-op threads for the whole process (on 2 shared cores 1 is often fastest).
    """

    def __init__(
        self,
        model: str = "all-MiniLM-L6-v2",
        batch_size: int = 64,
        device: str = "cpu",
        threads: int | None = None,
    ) -> None:
        import torch
        from sentence_transformers import SentenceTransformer

        if batch_size < 1:
            raise ValueError(f"batch_size must be >= 1, got {batch_size}")
        if threads is not None:
            if threads < 1:
                raise ValueError(f"threads must be >= 1, got {threads}")
            torch.set_num_threads(threads)
        self.batch_size = batch_size
        self.model_path = resolve_encoder(model)
        self._model = SentenceTransformer(str(self.model_path), device=device, local_files_only=True)
        dim = self._model.get_embedding_dimension()
        if dim is None:
            raise ValueError("the encoder model does not declare its embedding dimension")
        self._dim = int(dim)

    @property
    def dim(self) -> int:
        return self._dim

    def encode(self, texts: Sequence[str], progress: bool = False) -> np.ndarray:
        if isinstance(texts, str):
            raise TypeError("texts must be a sequence of strings, not a string")
        if len(texts) == 0:
            return np.zeros((0, self._dim), dtype=np.float32)
        vectors = self._model.encode(
            list(texts),
            batch_size=self.batch_size,
            normalize_embeddings=True,
            convert_to_numpy=True,
            show_progress_bar=progress,
        )
        return np.ascontiguousarray(vectors, dtype=np.float32)
