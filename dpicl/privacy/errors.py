"""Error messages of the DP core name what was wrong without echoing data: a parameter that should be a number is
shown when it is one, and only by its type otherwise (a misplaced argument may be private text)."""

from __future__ import annotations

import numbers


def shown(value) -> str:
    """`repr(value)` for numbers (and None), the type's name for anything else."""
    if value is None or isinstance(value, (numbers.Number, bool)):
        return repr(value)
    return f"a {type(value).__name__}"
