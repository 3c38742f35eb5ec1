"""The one progress display: a rich bar on stderr for each long step, shown only on a terminal.

In logs (a worker, CI, a file) a bar is noise: tqdm writes one carriage-return line per update, which a log keeps
as one very long line. `track` draws nothing there; the Prefect progress artifact and the stages' log lines say
how far a run is. `DPICL_PROGRESS=0` turns bars off on a terminal too.
"""

from __future__ import annotations

import sys
from collections.abc import Iterable, Iterator
from typing import TypeVar

from dpicl.settings import settings

T = TypeVar("T")


def shown() -> bool:
    """Whether progress bars are drawn: stderr is a terminal and DPICL_PROGRESS is not 0."""
    return sys.stderr.isatty() and settings().progress


def track(items: Iterable[T], description: str, *, total: int | None = None, enabled: bool = True) -> Iterator[T]:
    """`items`, with a bar while they are consumed (when `enabled` and `shown()`)."""
    if not (enabled and shown()):
        yield from items
        return
    from rich.console import Console
    from rich.progress import track as rich_track

    yield from rich_track(items, description=description, total=total, console=Console(stderr=True),
                          transient=True)


def silence_library_bars() -> None:
    """Turn off the bars libraries draw on their own (transformers' "Loading weights", the hub's downloads): a
    model loads in seconds, and each bar would be one more display beside ours."""
    import os

    from transformers.utils import logging as transformers_logging

    os.environ["HF_HUB_DISABLE_PROGRESS_BARS"] = "1"
    transformers_logging.disable_progress_bar()
