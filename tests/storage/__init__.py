"""Tests of the DuckDB storage layer (dpicl/storage)."""
