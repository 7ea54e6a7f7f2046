"""The mode registry: every way the lab runs a request, each declared in its own folder, listed here once.

The routes, the runners each server builds, their flags (each runner class
declares its own `settings`), --help, the race's choices, the 404 hint,
`/modes` (which the page and bench/siege.sh read), the bench's choices and
the ideal all derive from MODES: adding a mode is its folder plus one entry
here. Nothing here imports numpy, Tornado or a runner: the bench reads this
registry too.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from lab.modes import blocking, distributed, interpreters, processing, threading, upstream
from lab.modes.contract import Mode, Runner, ServerConfig

if TYPE_CHECKING:
    from lab.settings import Setting

MODES: dict[str, Mode] = {
    mode.name: mode
    for mode in (blocking.MODE, threading.MODE, processing.MODE, interpreters.MODE, distributed.MODE, upstream.MODE)
}


def mode_settings() -> list[Setting[Any]]:
    """Every flag the modes' runners declare, in registry order (lab/config.py puts them in --help and Config)."""
    return [setting for mode in MODES.values() for setting in mode.runner().settings]


def build_runners(config: ServerConfig) -> dict[str, Runner]:
    """A fresh runner for every mode (per server process, after any fork), each told its mode's name."""
    return {name: mode.runner().from_config(name, config) for name, mode in MODES.items()}


def preflight(config: ServerConfig) -> str | None:
    """Why this server cannot start, in one line, or None: asked of every runner that has a `preflight`.

    Runs in the parent before any fork, so that a forked server exits once
    instead of restarting children that fail one after another.
    """
    for mode in MODES.values():
        check = getattr(mode.runner(), "preflight", None)
        problem: str | None = check(config) if check is not None else None
        if problem:
            return problem
    return None
