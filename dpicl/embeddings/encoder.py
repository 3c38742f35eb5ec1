"""Sentence embeddings of texts (teacher outputs, candidates) with a local sentence-transformers model.

The embedded default is all-MiniLM-L6-v2 (384-d), loaded offline from its PyPI package. Vectors come back
unit-normalized, so inner product is cosine similarity (what the FAISS candidate search relies on).

Batch invariance (privacy invariant 10, docs/PRIVACY.md): by default every text is encoded in its own forward pass
(no padding to a longer neighbour), so a private text's embedding, down to its bits, does not depend on the
other texts of the call. Batched encoding (`batch_invariant=False`) is faster, but sentence-transformers sorts a
call's texts by length and pads each batch to its longest: one text's vector may then change in its last bits
when another text of the call changes, which breaks the sensitivity of the teachers' embedding sum.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from dpicl.inference.models import resolve_encoder
from dpicl.progress import shown, silence_library_bars, track


class Encoder:
    """Encodes batches of texts into float32 unit vectors (n × dim).

    `threads` sets torch's intra-op threads for the whole process (on 2 shared cores 1 is often fastest).
    `batch_invariant` (default True): one text per forward pass (module docstring); `batch_size` applies only
    when it is False.
    """

    def __init__(
        self,
        model: str = "all-MiniLM-L6-v2",
        batch_size: int = 64,
        device: str = "cpu",
        threads: int | None = None,
        batch_invariant: bool = True,
    ) -> None:
        import torch
        from sentence_transformers import SentenceTransformer

        if batch_size < 1:
            raise ValueError(f"batch_size must be >= 1, got {batch_size}")
        if threads is not None:
            if threads < 1:
                raise ValueError(f"threads must be >= 1, got {threads}")
            torch.set_num_threads(threads)
        if not isinstance(batch_invariant, bool):
            raise TypeError("batch_invariant must be a bool")
        self.batch_size = batch_size
        self.batch_invariant = batch_invariant
        self.model_path = resolve_encoder(model)
        silence_library_bars()
        self._model = SentenceTransformer(str(self.model_path), device=device, local_files_only=True)
        dim = self._model.get_embedding_dimension()
        if dim is None:
            raise ValueError("the encoder model does not declare its embedding dimension")
        self._dim = int(dim)

    @property
    def dim(self) -> int:
        return self._dim

    def encode(self, texts: Sequence[str], progress: bool = False, batched: bool = False) -> np.ndarray:
        """Unit vectors of `texts`. `batched`: the texts may share batches even when the encoder is batch invariant
        (their vectors then depend on each other in their last bits): public texts only, or vectors never released
        (a non-private baseline's)."""
        if isinstance(texts, str):
            raise TypeError("texts must be a sequence of strings, not a string")
        if len(texts) == 0:
            return np.zeros((0, self._dim), dtype=np.float32)
        # One text per forward pass: its own shape, no padding (sentence-transformers pads a batch to its
        # longest text), so its vector is a function of that text alone.
        batch = 1 if self.batch_invariant and not batched else self.batch_size
        texts = list(texts)
        # our one progress display (dpicl.progress), over chunks of whole batches
        chunk = batch * 32 if progress and shown() else len(texts)
        parts = [self._model.encode(texts[i:i + chunk], batch_size=batch, normalize_embeddings=True,
                                    convert_to_numpy=True, show_progress_bar=False)
                 for i in track(range(0, len(texts), chunk), "embed", total=-(-len(texts) // chunk),
                                enabled=progress)]
        return np.ascontiguousarray(np.concatenate(parts), dtype=np.float32)
