"""Is the process that wrote a record still running? Used by crash recovery: a writer lock or a run whose process is
gone is released or marked crashed instead of waiting for it forever.

A process is named by (pid, host, start time): pids are reused, the start time tells a new process with an old pid
apart. Only processes on this host can be checked; for another host the answer is None (unknown).
"""

from __future__ import annotations

import socket
from dataclasses import dataclass

import psutil

# start times are read from /proc in clock ticks: compare with some slack
_START_SLACK_SECONDS = 1.0


@dataclass(frozen=True)
class ProcessId:
    pid: int
    host: str
    started: float  # seconds since the epoch (psutil's create_time)

    def describe(self) -> str:
        return f"pid {self.pid} on {self.host}"


def this_process() -> ProcessId:
    return ProcessId(psutil.Process().pid, socket.gethostname(), psutil.Process().create_time())


def alive(process: ProcessId) -> bool | None:
    """True while the process runs, False once it is gone, None when it runs on another host (cannot be told)."""
    if process.host != socket.gethostname():
        return None
    try:
        found = psutil.Process(process.pid)
        if abs(found.create_time() - process.started) > _START_SLACK_SECONDS:
            return False  # the pid now belongs to another process
        return found.status() != psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return False
    except psutil.AccessDenied:  # exists, owned by someone else
        return True
