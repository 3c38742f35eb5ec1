"""Embeddings of texts and FAISS nearest-candidate search (sentence-transformers + faiss)."""

import os

# Models are never fetched at run time (README, docs/STACK.md): make the Hugging Face libraries fail fast instead of
# trying the network. Set before they are imported; an explicit user setting wins.
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
