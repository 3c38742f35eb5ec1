"""The privacy core stays pure: numpy, scipy, prv_accountant, autodp, the standard library and dpicl.privacy itself.

The walk covers every module under dpicl/privacy and every import statement in it, function-local ones included
(``ast.walk``), with relative imports resolved against the module's own package: nothing of dpicl outside
dpicl.privacy may be reached (the application injects what the core needs, e.g. ``calibration.set_cache_dir``).
"""

import ast
import subprocess
import sys
from pathlib import Path

import dpicl.privacy

ALLOWED_ROOTS = {"numpy", "scipy", "prv_accountant", "autodp"}
CORE = "dpicl.privacy"
PRIVACY_DIR = Path(dpicl.privacy.__file__).parent


def _module_name(path: Path) -> str:
    parts = list(path.relative_to(PRIVACY_DIR).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join([CORE, *parts])


def imported_modules(path: Path, source: str | None = None) -> list[str]:
    """Absolute names of every module ``path`` (or ``source`` as if it were at ``path``) imports, anywhere in it
    (relative imports resolved)."""
    tree = ast.parse(path.read_text(encoding="utf-8") if source is None else source)
    package = _module_name(path) if path.name == "__init__.py" else _module_name(path).rpartition(".")[0]
    names = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names += [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            if node.level == 0:
                base = node.module
            else:
                parts = package.split(".")
                if node.level - 1 >= len(parts):
                    raise AssertionError(f"{path}: a relative import beyond the top-level package")
                base = ".".join(parts[: len(parts) - (node.level - 1)] + ([node.module] if node.module else []))
            # `from X import Y` may name a submodule Y of X: count both
            names += [base] + [f"{base}.{a.name}" for a in node.names if a.name != "*"]
    return names


def _allowed(name: str) -> bool:
    root = name.split(".")[0]
    if root == "dpicl":
        return name == CORE or name.startswith(CORE + ".")
    return root in ALLOWED_ROOTS or root in sys.stdlib_module_names


def test_every_module_has_a_docstring():
    for path in PRIVACY_DIR.rglob("*.py"):
        assert ast.get_docstring(ast.parse(path.read_text(encoding="utf-8"))), f"{path} has no module docstring"


def test_static_imports_stay_inside_the_core():
    paths = sorted(PRIVACY_DIR.rglob("*.py"))
    assert len(paths) > 20  # the walk really covers the package
    outside = [f"{p.relative_to(PRIVACY_DIR.parent.parent)}: imports {n}"
               for p in paths for n in imported_modules(p) if not _allowed(n)]
    assert outside == []


def test_the_import_walk_sees_local_and_relative_imports():
    # the checker itself: a function-local import of the application, and a relative one, are both caught
    module = PRIVACY_DIR / "accounting" / "calibration.py"
    assert "dpicl.privacy.accounting.events" in imported_modules(module)
    probe = ('"""probe"""\n\ndef f():\n    from dpicl.inference.models import cache_dir\n'
             '    from ...storage import ledger\n')
    names = imported_modules(module, probe)
    assert "dpicl.inference.models" in names and "dpicl.storage" in names
    assert not any(_allowed(n) for n in ("dpicl.inference.models", "dpicl.storage", "dpicl", "dpicl.privacyx"))


def test_importing_the_core_loads_no_heavy_dependencies():
    modules = [f"dpicl.privacy.{p.relative_to(PRIVACY_DIR).with_suffix('').as_posix().replace('/', '.')}"
               for p in PRIVACY_DIR.rglob("*.py") if p.name != "__init__.py"]
    code = "import sys\n" + "".join(f"import {m}\n" for m in modules) + \
        "print(sorted(m for m in ('torch', 'prefect', 'duckdb') if m in sys.modules))"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "[]"
