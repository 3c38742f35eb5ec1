"""Tests of the sentence encoder and FAISS candidate search."""
