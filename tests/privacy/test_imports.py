"""The privacy core stays pure: numpy, scipy, prv_accountant, autodp and the standard library only."""

import ast
import subprocess
import sys
from pathlib import Path

import dpicl.privacy

ALLOWED_ROOTS = {"numpy", "scipy", "prv_accountant", "autodp", "dpicl"}
PRIVACY_DIR = Path(dpicl.privacy.__file__).parent


def test_static_imports_are_allowed():
    for path in PRIVACY_DIR.rglob("*.py"):
        tree = ast.parse(path.read_text())
        assert ast.get_docstring(tree), f"{path} has no module docstring"
        for node in ast.walk(tree):
            if isinstance(node, ast.Import):
                roots = [a.name.split(".")[0] for a in node.names]
            elif isinstance(node, ast.ImportFrom) and node.level == 0:
                roots = [node.module.split(".")[0]]
            else:
                continue
            for root in roots:
                assert root in ALLOWED_ROOTS or root in sys.stdlib_module_names, f"{path}: imports {root}"


def test_importing_the_core_loads_no_heavy_dependencies():
    modules = [f"dpicl.privacy.{p.relative_to(PRIVACY_DIR).with_suffix('').as_posix().replace('/', '.')}"
               for p in PRIVACY_DIR.rglob("*.py") if p.name != "__init__.py"]
    code = "import sys\n" + "".join(f"import {m}\n" for m in modules) + \
        "print(sorted(m for m in ('torch', 'prefect', 'duckdb') if m in sys.modules))"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "[]"
