"""A picture of a privacy budget: ε spent over time against the limit (PNG), for `dpicl budget show --plot` and the
Prefect artifact each run publishes. It shows the ledger's public numbers only (times and recorded bounds)."""

from __future__ import annotations

import base64
import io
from collections.abc import Sequence
from datetime import datetime, timedelta
from pathlib import Path


def spend_png(dataset: str, history: Sequence[tuple[datetime, float]], limit: float) -> bytes:
    """PNG bytes: the spent ε as a step line over the ledger entries' times, the limit as a dashed line."""
    import matplotlib

    matplotlib.use("Agg")  # no display on workers
    import matplotlib.dates
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(7, 3.5))
    try:
        if history:
            times, spent = zip(*history)
            # from zero just before the first entry; at least a minute either side so close entries stay apart
            pad = max((times[-1] - times[0]) * 0.05, timedelta(minutes=1))
            ax.step([times[0] - pad, *times], [0.0, *spent], where="post", color="tab:blue",
                    label=f"spent ε ({spent[-1]:.3g})")
            ax.plot(times[-1], spent[-1], "o", color="tab:blue")
            ax.set_xlim(times[0] - pad, times[-1] + pad)
            locator = matplotlib.dates.AutoDateLocator()
            ax.xaxis.set_major_locator(locator)
            ax.xaxis.set_major_formatter(matplotlib.dates.ConciseDateFormatter(locator))
        ax.axhline(limit, color="tab:red", linestyle="--", label=f"limit ε = {limit:g}")
        ax.set_ylim(0, limit * 1.1)
        ax.set_xlabel("time of the ledger entry")
        ax.set_ylabel("ε spent (composed bound)")
        ax.set_title(f"privacy budget of {dataset!r}: {len(history)} ledger entries")
        ax.legend(loc="lower right")
        fig.tight_layout()
        buffer = io.BytesIO()
        fig.savefig(buffer, format="png", dpi=100)
    finally:
        plt.close(fig)
    return buffer.getvalue()


def write_spend_plot(path: Path, dataset: str, history: Sequence[tuple[datetime, float]], limit: float) -> Path:
    """The PNG written to `path` (written whole or not at all: a temporary file renamed into place)."""
    data = spend_png(dataset, history, limit)
    path = Path(path)
    partial = path.with_name(f".{path.name}.partial")
    partial.write_bytes(data)
    partial.replace(path)
    return path


def spend_data_url(dataset: str, history: Sequence[tuple[datetime, float]], limit: float) -> str:
    """The PNG as a data: URL, for a Prefect image artifact (shown inline by the UI; no file server needed)."""
    return "data:image/png;base64," + base64.b64encode(spend_png(dataset, history, limit)).decode("ascii")
