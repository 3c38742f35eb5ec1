"""Tests of the LLM backends and offline model resolution."""
