"""Data paths in configs: environment variables, `~`, and the config's own folder.

The bundled benchmark configs name their files under `$DPICL_DATA` (the folder that holds the benchmark
datasets: README, "Benchmark data"), the demo under `$DPICL_DEMO_DATA` (packaged with dpicl), so a copied config
reads the same files wherever it is.
"""

from __future__ import annotations

import os
import re
from pathlib import Path

# variables a data path may use that need not be set: the demo's data, packaged with dpicl
PATH_DEFAULTS = {"DPICL_DEMO_DATA": str(Path(__file__).parent / "demo" / "data")}
_VARIABLE = re.compile(r"\$\{(\w+)\}|\$(\w+)")


def data_path(written: str, folder: Path) -> str:
    """A config's data path as a file path: `$VAR` / `${VAR}` from the environment (or PATH_DEFAULTS), `~` the
    home folder, relative to the config's own `folder`. A variable that opens the path and holds a relative path
    is relative to the current folder, as in a shell (`DPICL_DATA=./data dpicl ingest …`). A path naming a variable
    that is not set stays as written, so the config still loads (e.g. for `dpicl plan`) and ingesting it says which
    variable to set."""
    unset = False

    def value(match: re.Match) -> str:
        nonlocal unset
        name = match.group(1) or match.group(2)
        found = os.environ.get(name) or PATH_DEFAULTS.get(name)
        unset = unset or found is None
        if found is None:
            return match.group(0)
        return os.path.abspath(os.path.expanduser(found)) if match.start() == 0 else found

    expanded = _VARIABLE.sub(value, written)
    return written if unset else str((folder / Path(expanded).expanduser()).resolve())


def unset_variables(path: str) -> list[str]:
    """The variables a data path still names (not set when its config was loaded)."""
    return [a or b for a, b in _VARIABLE.findall(path)]
