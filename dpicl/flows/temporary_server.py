"""Prefect's temporary server dies with the process that started it.

A flow run without `PREFECT_API_URL` (e.g. `dpicl answer`) makes Prefect start a temporary server, a child process
that it stops at interpreter exit. A run killed with SIGKILL never gets there, and the server would live on as an
orphan. `stop_with_this_process()` starts that server through the same parent-death trampoline `dpicl serve` uses
for its server (Linux `PR_SET_PDEATHSIG`), so the kernel stops it when its parent dies.

The signal fires when the *thread* that started the child ends, so only a server started from the main thread gets
it (flows called from the CLI or a script start it there); another thread's server is started as Prefect does.
"""

from __future__ import annotations

import os
import subprocess
import sys
import threading


class _SubprocessWithParentDeath:
    """Stands in for the `subprocess` module inside Prefect's server module, whose only Popen starts the server."""

    def __getattr__(self, name: str):
        return getattr(subprocess, name)

    @staticmethod
    def Popen(args, **kwargs):  # the name Prefect calls
        from dpicl.serve import _STOP_WITH_PARENT

        if threading.current_thread() is threading.main_thread() and list(args[:1]) == [sys.executable]:
            args = [sys.executable, "-c", _STOP_WITH_PARENT, str(os.getpid()), *args[1:]]
        return subprocess.Popen(args, **kwargs)


def stop_with_this_process() -> None:
    """Make Prefect's temporary server, if this process is to start one, stop when the process dies (idempotent)."""
    if sys.platform != "linux":
        return
    from prefect.settings import PREFECT_API_URL

    if PREFECT_API_URL.value():  # a real server: nothing is started here
        return
    from prefect.server.api import server

    if not isinstance(server.subprocess, _SubprocessWithParentDeath):
        server.subprocess = _SubprocessWithParentDeath()
