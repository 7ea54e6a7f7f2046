"""Optional dependencies of the bench tools: when one is missing, one line naming its install command, exit 2.

A tool checks what it needs before it starts anything (a server, a browser),
so that a missing extra ends the run at once, with no traceback:

    module = need_module("playwright.sync_api", "Playwright", DEV_EXTRAS, tool="bench.page")
    chromium = need_program("chromium", "sudo apt-get install chromium", tool="bench.page")
"""

from __future__ import annotations

import importlib
import shutil
import sys
from types import ModuleType

# The install commands people already use for the lab's optional sets (CONTRIBUTING.md).
DEV_EXTRAS = ".venv/bin/pip install -r requirements-dev.txt (or make test)"


def missing(what: str, install: str, *, tool: str) -> SystemExit:
    """Say on stderr, in one line, what `tool` lacks and how to install it; the SystemExit(2) to raise."""
    print(f"error: {tool} needs {what}, which is not installed; install it with: {install}", file=sys.stderr)
    return SystemExit(2)


def need_module(module: str, what: str, install: str, *, tool: str) -> ModuleType:
    """`module`, imported; exits 2 with the one-line hint when it cannot be imported."""
    try:
        return importlib.import_module(module)
    except ImportError:
        raise missing(what, install, tool=tool) from None


def need_program(program: str, install: str, *, tool: str) -> str:
    """The path of `program` on PATH; exits 2 with the one-line hint when there is none."""
    found = shutil.which(program)
    if found is None:
        raise missing(program, install, tool=tool)
    return found
