"""Fixtures of the backend tests: the vllm gate (skip without vllm, fail with DPICL_REQUIRE_VLLM=1) and one
engine per session (a process holds one in-process vLLM engine at a time)."""

import importlib.util
import os

import pytest


def require_vllm() -> None:
    """Skip the calling test when vllm is not installed; under DPICL_REQUIRE_VLLM=1 (make test-vllm) fail."""
    if importlib.util.find_spec("vllm") is not None:
        return
    if os.environ.get("DPICL_REQUIRE_VLLM") == "1":
        pytest.fail("DPICL_REQUIRE_VLLM=1 but vllm is not installed in this environment (see `make test-vllm`)")
    pytest.skip("vllm is not installed (the vllm tests run in .venv-vllm: `make test-vllm`)")


@pytest.fixture(scope="session")
def vllm_backend():
    require_vllm()
    from dpicl.inference import load_backend

    # vLLM cannot be batch invariant (privacy invariant 10): its tests accept that explicitly.
    backend = load_backend("vllm", model="smollm2", device="cpu", dtype="float32", batch_invariant=False)
    yield backend
    backend.close()


@pytest.fixture(scope="session")
def hf_reference():
    """The hf backend, the reference the other backends are compared with (fp32; on the CPU unless
    DPICL_TEST_DEVICE names another device)."""
    from dpicl.inference import load_backend
    from tests.inference.device import DEVICE

    backend = load_backend("hf", model="smollm2", device=DEVICE, threads=1, batch_size=16)
    yield backend
    backend.close()
