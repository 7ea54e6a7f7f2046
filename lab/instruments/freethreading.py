"""What this interpreter says of its GIL, and which optional dependencies it lacks (/stats `server.interpreter`).

A free-threaded build (CPython 3.13t, `./configure --disable-gil`) starts
with its GIL off. Importing a C extension that has not declared it runs
safely without one turns the GIL back on for the rest of the process, and
CPython says so once, in a RuntimeWarning naming the module; `watch_gil()`
keeps that name. PYTHON_GIL=0 (or -X gil=0) keeps the GIL off whatever is
imported, at the user's own risk; PYTHON_GIL=1 runs with it on from the start.
Whether the GIL is on now: workloads/clocks.py's gil_enabled(), asked each time.
"""

from __future__ import annotations

import importlib.util
import logging
import os
import re
import sysconfig
import warnings
from typing import Any, TextIO

from workloads.clocks import gil_enabled

log = logging.getLogger(__name__)

# CPython 3.13's words (Python/import.c): "... has been enabled to load module 'NAME', which has not declared ..."
_ENABLED_TO_LOAD = re.compile(r"has been enabled to load module '([^']+)'")

# Each optional dependency the lab runs without, and what it lacks then. None of them has a wheel for 3.13t.
OPTIONAL = {
    "orjson": "JSON answers are written by the standard library's json (slower; NaN is written as NaN, not null)",
    "gilknocker": "no GIL meter: /stats gil_contention is null",
    "matplotlib": "a bench tool that draws a chart exits 2 naming it (bench.race --no-files draws none)",
    "psycopg_binary": "psycopg uses the system's libpq (page on a PostgreSQL --database)",
    "psycopg": "page on a PostgreSQL --database is unavailable (the embedded SQLite still runs it)",
}

_enabled_by: list[str] = []


def free_threaded_build() -> bool:
    """True on an interpreter built with --disable-gil, whether or not its GIL has been turned back on since."""
    return bool(sysconfig.get_config_var("Py_GIL_DISABLED"))


def _note(message: Warning | str) -> None:
    match = _ENABLED_TO_LOAD.search(str(message))
    if match and match.group(1) not in _enabled_by:
        _enabled_by.append(match.group(1))


def watch_gil() -> None:
    """From now on, keep the name of the module whose import turns the GIL back on (the warning still shows).

    Called first thing in server.py, before anything imports a C extension.
    """
    if not free_threaded_build():
        return
    shown = warnings.showwarning

    def show(  # noqa: PLR0917 -- warnings.showwarning's own signature
        message: Warning | str,
        category: type[Warning],
        filename: str,
        lineno: int,
        file: TextIO | None = None,
        line: str | None = None,
    ) -> None:
        _note(message)
        shown(message, category, filename, lineno, file, line)

    warnings.showwarning = show


def missing() -> dict[str, str]:
    """Each optional dependency not installed here, and what the lab does without it (found, not imported)."""
    return {name: effect for name, effect in OPTIONAL.items() if importlib.util.find_spec(name) is None}


def gil_enabled_by() -> str | None:
    """Why the GIL is on in a free-threaded build; None where it is off, or the build has one anyway."""
    if not free_threaded_build() or not gil_enabled():
        return None
    if os.environ.get("PYTHON_GIL") == "1":
        return "PYTHON_GIL=1"
    if _enabled_by:
        return f"importing {_enabled_by[0]}, a C extension not declared free-threading-safe"
    return "an extension module's import (its name went unseen: warnings were filtered, or it came before start-up)"


def report() -> dict[str, Any]:
    """/stats `server.interpreter`: the build, the GIL now and why, PYTHON_GIL, the optional dependencies missing."""
    return {
        "free_threaded_build": free_threaded_build(),
        "gil_enabled": gil_enabled(),
        "gil_enabled_by": gil_enabled_by(),
        "python_gil": os.environ.get("PYTHON_GIL"),
        "missing": missing(),
    }


def log_start() -> None:
    """At start-up: the GIL's state on a free-threaded build, and each optional dependency missing."""
    if free_threaded_build():
        why = gil_enabled_by()
        if why is None:
            log.info("free-threaded build: the GIL is off, threads compute in parallel")
        else:
            log.warning("free-threaded build, but the GIL is on: turned on by %s (PYTHON_GIL=0 keeps it off)", why)
    for name, effect in missing().items():
        log.info("%s is not installed: %s", name, effect)
