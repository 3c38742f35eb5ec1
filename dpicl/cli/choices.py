"""The fixed choices of `dpicl` options as Enums: Typer checks them, lists them in --help and completes them."""

from __future__ import annotations

from enum import Enum

from dpicl import methods
from dpicl.storage.ingest_options import FORMAT_NAMES


class Kind(str, Enum):
    """What `dpicl ingest` registers a file as."""

    private = "private"
    public = "public"
    queries = "queries"


class TaskType(str, Enum):
    summarization = "summarization"
    generation = "generation"
    classification = "classification"


class Stage(str, Enum):
    """The stage `dpicl rerun --from` starts at."""

    aggregate = "aggregate"
    release = "release"


class Mechanism(str, Enum):
    """dp-fewshot's noise (`dpicl plan --mechanism`)."""

    gaussian = "gaussian"
    exponential = "exponential"


Format = Enum("Format", {name: name for name in FORMAT_NAMES}, type=str)
Format.__doc__ = "A data file's format (`dpicl ingest --format`)."
# the registered methods when the command line is built (a method registered later is not a choice)
MethodName = Enum("MethodName", {name: name for name in methods.names()}, type=str)
MethodName.__doc__ = "A registered method's name."
