"""The method registry: every method the pipeline runs, by name (docs/ARCHITECTURE.md, "Adding a method").

Config validation, `dpicl plan`, `dpicl methods`, the tasks, the flows, rerun and evaluation look methods up here;
nothing else keeps a table of methods.
"""

from __future__ import annotations

import importlib

from dpicl.methods.base import Method

# the built-in methods, in the order `dpicl methods` lists them (one module each)
_BUILTIN = ("esa", "rnm", "ksa_jem", "ksa_ptr", "sga", "ksa_public", "dps_mozo", "adapmixed", "dp_fewshot",
            "synthetic_icl")
_REGISTRY: dict[str, Method] = {}
# the method of a config that names none, and of `dpicl plan` without --method
DEFAULT = "esa"


def register(method: type[Method]) -> type[Method]:
    """Register a method class (usable as a decorator); its name must be new."""
    if method.name in _REGISTRY and type(_REGISTRY[method.name]) is not method:
        raise ValueError(f"a method named {method.name!r} is already registered")
    _REGISTRY[method.name] = method()
    return method


def unregister(name: str) -> None:
    """Remove a registered method (tests that register their own)."""
    _REGISTRY.pop(name, None)


def _load_builtin() -> None:
    for module in _BUILTIN:
        importlib.import_module(f"dpicl.methods.{module}")


def get(name: str) -> Method:
    """The method named `name`; ValueError naming the known ones otherwise."""
    _load_builtin()
    if name not in _REGISTRY:
        raise ValueError(f"unknown method {name!r}; known: {', '.join(names())}")
    return _REGISTRY[name]


def all_methods() -> list[Method]:
    """Every registered method: the built-in ones in their order, then the others as registered (the order modules
    happened to be imported in must not show)."""
    _load_builtin()
    builtin = [f"dpicl.methods.{module}" for module in _BUILTIN]
    rank = {m.name: builtin.index(type(m).__module__) if type(m).__module__ in builtin else len(builtin)
            for m in _REGISTRY.values()}
    return sorted(_REGISTRY.values(), key=lambda m: rank[m.name])


def names() -> list[str]:
    return [m.name for m in all_methods()]
