"""The model dtype a config asks for, with `auto`: bfloat16 where the hardware computes it natively, else float32.

bfloat16 halves the weights' memory traffic, which is what a CPU's decoding waits on, but only CPUs with BF16
instructions (AVX512-BF16, AMX) compute it fast: measured on a 2-core AMD EPYC without them, a SmolLM2 prefill
of 200 tokens took 4.9 s in bfloat16 against 0.8 s in float32 (docs/PERFORMANCE.md). The answers differ in their
last bits between the two, not in quality (the demo's SGA: ROUGE-L 39.8 ± 2.8 in bfloat16, 37.4 ± 1.7 in float32).
"""

from __future__ import annotations

DTYPES = ("auto", "float32", "bfloat16", "float16")


def resolve_dtype(dtype: str, device: str) -> str:
    """`dtype` itself, or for `auto` the dtype the `device` ("cpu" or "cuda") computes fastest: bfloat16 on a GPU
    that supports it and on a CPU with BF16 instructions, float32 elsewhere."""
    if dtype not in DTYPES:
        raise ValueError(f"dtype must be one of {', '.join(DTYPES)}, got {dtype!r}")
    if dtype != "auto":
        return dtype
    import torch

    if device == "cuda":
        return "bfloat16" if torch.cuda.is_bf16_supported() else "float16"
    return "bfloat16" if cpu_has_bf16() else "float32"


def cpu_has_bf16() -> bool:
    """Whether this CPU has native BF16 instructions (as oneDNN, PyTorch's CPU kernels, detects them)."""
    import torch

    try:
        return bool(torch.ops.mkldnn._is_mkldnn_bf16_supported())
    except (AttributeError, RuntimeError):  # a build without oneDNN: no fast bfloat16 either
        return False
