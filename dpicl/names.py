"""The one check of a dataset or backlog name, used wherever a name is accepted (ingest, budgets, the CLI).

A name is printed in tables and error messages, stored as a key and shown in Prefect: it must be printable text on
one line. Refused: empty or whitespace-only names, whitespace at either end, control and format characters (NUL,
newlines, tabs, escape sequences, bidi overrides, zero-width characters), line and paragraph separators,
surrogates (what a non-UTF-8 command-line argument decodes to) and names over `MAX_LENGTH` characters.

The message says what is wrong and where, never echoing the name (it may hold the very characters that are
refused, e.g. a terminal escape sequence).
"""

from __future__ import annotations

import unicodedata

MAX_LENGTH = 200
# Cc control, Cf format, Cs surrogate, Co private use, Cn unassigned, Zl line and Zp paragraph separators
_REFUSED_CATEGORIES = {"Cc", "Cf", "Cs", "Co", "Cn", "Zl", "Zp"}


class InvalidName(ValueError):
    """A dataset or backlog name that cannot be used (the message never contains the name)."""


def name_problem(name: object, what: str = "name") -> str | None:
    """Why `name` cannot be used as a dataset or backlog name, or None if it can."""
    if not isinstance(name, str):
        return f"the {what} must be text"
    if not name.strip():
        return f"the {what} is empty (or only whitespace); give a name such as my-dataset"
    if len(name) > MAX_LENGTH:
        return f"the {what} has {len(name)} characters; at most {MAX_LENGTH} are allowed"
    for position, char in enumerate(name, 1):
        if unicodedata.category(char) in _REFUSED_CATEGORIES:
            return (f"the {what} contains a control or invisible character (U+{ord(char):04X}) at position "
                    f"{position}; use printable characters only")
    if name != name.strip():
        return f"the {what} starts or ends with whitespace; remove it"
    return None


def check_name(name: object, what: str = "name") -> str:
    """`name` if it is a usable dataset or backlog name; InvalidName otherwise."""
    problem = name_problem(name, what)
    if problem is not None:
        raise InvalidName(problem)
    return name  # type: ignore[return-value]
