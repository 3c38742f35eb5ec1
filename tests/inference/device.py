"""The torch device of the hf backend tests: the CPU, or the GPU under `DPICL_TEST_DEVICE=cuda` (run by hand on a
GPU machine; CI has none)."""

import os

DEVICE = os.environ.get("DPICL_TEST_DEVICE", "cpu")
