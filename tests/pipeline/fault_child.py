"""The child process of the fault-injection and scale-out tests: wrap one function (by module and name) so that the
process kills itself with SIGKILL before or after its n-th call, then run a flow; prints FINISHED when the fault was
never reached.

`main()` is the child of a new interpreter (`python -c`, the spec in $DPICL_FAULT). `forked()` is the child of a
multiprocessing forkserver that imported the flows once (`FLOWS`): the import is 4 of the 7 CPU seconds of a
child, and test_faults.py runs 22 of them."""

from __future__ import annotations

import importlib
import json
import os
import signal
import sys
import tempfile

FLOWS = ("dpicl.flows.answer_backlog", "dpicl.flows.synthesize_demos", "dpicl.flows.rerun")


def _kill_at(spec: dict) -> None:
    module, _, attribute = spec["target"].partition(":")
    owner = importlib.import_module(module)
    *path, name = attribute.split(".")
    for part in path:
        owner = getattr(owner, part)
    original = getattr(owner, name)
    calls = 0

    def wrapper(*args, **kwargs):
        nonlocal calls
        calls += 1
        hit = calls == spec["call"]
        if hit and spec["when"] == "before":
            os.kill(os.getpid(), signal.SIGKILL)
        result = original(*args, **kwargs)
        if hit and spec["when"] == "after":
            os.kill(os.getpid(), signal.SIGKILL)
        return result

    setattr(owner, name, wrapper)


def _run(flow: str, kwargs: dict) -> None:
    if flow == "answer":
        from dpicl.flows.answer_backlog import answer_backlog as run
    elif flow == "synthesize":
        from dpicl.flows.synthesize_demos import synthesize_demos as run
    else:
        from dpicl.flows.rerun import rerun as run
    run(**kwargs)
    print("FINISHED", flush=True)


def main() -> None:
    """`python -c "from tests.pipeline.fault_child import main; main()" FLOW KWARGS_JSON`."""
    _kill_at(json.loads(os.environ["DPICL_FAULT"]))
    _run(sys.argv[1], json.loads(sys.argv[2]))


def forked(spec: dict, flow: str, kwargs: dict, tmp: str, log: str) -> None:
    """A forked child: its output to `log`, its temporary files under `tmp` (what a killed child cannot clean up
    stays in its test's folder)."""
    out = os.open(log, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    os.dup2(out, 1)
    os.dup2(out, 2)
    os.environ["TMPDIR"] = tmp
    tempfile.tempdir = None
    _kill_at(spec)
    try:
        _run(flow, kwargs)
    finally:
        sys.stdout.flush()
        sys.stderr.flush()
