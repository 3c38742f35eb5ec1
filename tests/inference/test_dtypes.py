"""`model.dtype: auto`: bfloat16 only where the hardware computes it natively."""

from __future__ import annotations

import platform
from pathlib import Path

import pytest
from pydantic import ValidationError

from dpicl.config import ModelConfig
from dpicl.inference.dtypes import cpu_has_bf16, resolve_dtype


@pytest.mark.skipif(platform.system() != "Linux" or platform.machine() != "x86_64",
                    reason="reads the x86 CPU flags of /proc/cpuinfo")
def test_the_bf16_detection_agrees_with_the_cpu_flags():
    flags = next(line for line in Path("/proc/cpuinfo").read_text().splitlines() if line.startswith("flags"))
    native = bool({"avx512_bf16", "amx_bf16"} & set(flags.split(":", 1)[1].split()))
    assert cpu_has_bf16() == native
    assert resolve_dtype("auto", "cpu") == ("bfloat16" if native else "float32")


@pytest.mark.parametrize("dtype", ["float32", "bfloat16", "float16"])
def test_an_explicit_dtype_is_kept_on_any_device(dtype):
    assert resolve_dtype(dtype, "cpu") == dtype
    assert resolve_dtype(dtype, "cuda") == dtype


def test_an_unknown_dtype_is_refused_with_the_choices():
    with pytest.raises(ValueError, match="auto, float32, bfloat16, float16.*'bf16'"):
        resolve_dtype("bf16", "cpu")
    with pytest.raises(ValidationError, match="dtype"):
        ModelConfig(dtype="bf16")
