"""What runs inside a sub-interpreter of the interpreters mode, and where PEP 734's API comes from.

A sub-interpreter imports this module (and the workload it runs) afresh:
it must not pull in numpy, which refuses to load there, nor Tornado, which
it does not need. Python 3.14 has the API in the standard library
(`concurrent.interpreters`, `concurrent.futures.InterpreterPoolExecutor`);
on 3.12 and 3.13 the `interpreters-pep-734` backport on PyPI provides the
same under `interpreters_backport`.
"""

from __future__ import annotations

import importlib
import platform
import sys
import threading
from collections.abc import Callable
from concurrent import futures
from concurrent.futures import ThreadPoolExecutor
from dataclasses import replace
from functools import cache
from typing import Any, cast

from lab.modes.starts import report_start
from workloads.clocks import OWN_GIL_THREAD, Clocks
from workloads.page import database
from workloads.timing import RunRecord, time_call

BACKPORT = "interpreters-pep-734"


def executor_class() -> type[ThreadPoolExecutor]:
    """InterpreterPoolExecutor (a ThreadPoolExecutor), the standard library's (3.14+) or the backport's.

    ImportError if neither is there.
    """
    found = getattr(futures, "InterpreterPoolExecutor", None)
    if found is None:
        found = importlib.import_module("interpreters_backport.concurrent.futures").InterpreterPoolExecutor
    return cast(type[ThreadPoolExecutor], found)


@cache
def unavailable() -> str | None:
    """Why this Python cannot run a pool of sub-interpreters, in one sentence, or None."""
    # (Through a name: mypy checks for 3.11 and would call the rest unreachable.)
    version = sys.version_info
    if version < (3, 12):
        return (
            f"sub-interpreters with a GIL of their own need Python 3.12 or later; this server runs "
            f"{platform.python_version()} (docs/modes.md#interpreters says how to run it on another Python)"
        )
    try:
        executor_class()
    except ImportError:
        return (
            f"Python {platform.python_version()} needs the {BACKPORT} backport for pools of sub-interpreters: "
            f"pip install {BACKPORT} (make install puts it in the venv)"
        )
    return None


@cache
def _interpreters() -> Any:
    """PEP 734's `interpreters` module: the standard library's (3.14+) or the backport's.

    Looked up once per interpreter: on 3.12-3.13 the standard library's
    import fails first, and a failed import searches sys.path again each
    time: 18 us a job, on 3.13 here.
    """
    try:
        return importlib.import_module("concurrent.interpreters")
    except ImportError:
        return importlib.import_module("interpreters_backport.interpreters")


def interpreter_id() -> int:
    """The id of the interpreter this code runs in (0: the main one)."""
    return int(_interpreters().get_current().id)


@cache
def gil_is_own() -> bool:
    """Whether this sub-interpreter runs under a GIL of its own (PEP 684), as its config says.

    The pool's interpreters are made with the default config, which gives
    each its own GIL, and each runs one job at a time on one thread: nothing
    else takes that GIL, so a run's blocked time there is something else.
    False in the main interpreter, or where the config cannot be read.
    """
    try:
        low_level = importlib.import_module("_interpreters")  # the backport installs one on 3.12
        current = low_level.get_current()[0]
        return bool(current != low_level.get_main()[0] and low_level.get_config(current).gil == "own")
    except (ImportError, AttributeError):
        return False


# A run's record as it crosses back to the main interpreter: its values in this order, a tuple. A tuple of
# numbers, strings and None is shared between interpreters as it is; a dict is not, and the pool would first
# fail to share it, then pickle it here and unpickle it there (about 15 us a job more).
FIELDS = ("result", "pid", "thread", "started", "finished", "cpu", "core_wait", "io_wait", "blocked", "gil_wait",
          "interpreter")  # fmt: skip


# Results the pool shares as they are. An int is shared only within 64 bits: past that the pool's attempt
# raises OverflowError, which it does not catch, and the job's answer never comes (the backport, on 3.13).
_SHARED_AS_IS = (type(None), bool, float, str)
_INT64 = range(-(2**63), 2**63)


def record_of(values: tuple[Any, ...] | RunRecord) -> RunRecord:
    """The record `run` sent: from its values (FIELDS), or as it is where `run` sent the record itself."""
    if isinstance(values, dict):
        return values
    return cast(RunRecord, dict(zip(FIELDS, values, strict=True)))


@cache
def _clocks() -> Clocks:
    """This interpreter's thread's clocks: OWN_GIL_THREAD's (its thread named by its native id, as this
    interpreter knows it), its GIL shared if the interpreter shares the main one's."""
    return OWN_GIL_THREAD if gil_is_own() else replace(OWN_GIL_THREAD, shared_gil=True)


def run(
    func: Callable[..., Any],
    params: dict[str, Any],
    database_url: str | None = None,
    start: tuple[int, int] | None = None,
) -> tuple[Any, ...] | RunRecord:
    """Run one workload here, in a sub-interpreter, timed on this thread; `page` queries `database_url`.

    Returns the record's values in FIELDS' order (record_of makes it a record
    again), or, for a result the interpreters cannot share as it is (a
    dict, an int past 64 bits), the record itself, which the pool pickles.
    The interpreter opens its own connection on its first page (each
    interpreter has its own modules, so its own database object). `start`,
    (the job's id, the start pipe's writing end): the job's start is reported
    there first (lab/modes/starts.py), a descriptor being the process's,
    whichever interpreter writes to it.

    `func` arrives pickled by reference and is imported here. The thread is
    the pool's OS thread, but this interpreter only knows it by its native id;
    the runner puts the pool thread's name back (lab/modes/interpreters/runner.py).
    """
    if start is not None:
        report_start(start[1], start[0], threading.get_native_id())
    database.use(database_url)
    record = time_call(func, params, clocks=_clocks())
    record["interpreter"] = interpreter_id()
    result = record["result"]
    if not (isinstance(result, _SHARED_AS_IS) or (type(result) is int and result in _INT64)):
        return record
    fields = cast(dict[str, Any], record)
    return tuple(fields[name] for name in FIELDS)
