"""Embeddings of texts and FAISS nearest-candidate search (sentence-transformers + faiss)."""
