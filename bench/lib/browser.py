"""Headless Chromium for the tools and tests that drive the lab page: Debian's chromium, through Playwright.

Playwright's own browser download is not used (the machine may be offline):
its Python package drives the chromium that apt installs.
"""

from __future__ import annotations

import shutil
from pathlib import Path
from typing import TYPE_CHECKING

from bench.lib.optional import DEV_EXTRAS, missing, need_module

if TYPE_CHECKING:
    from playwright.sync_api import Browser, Playwright

# How Chromium runs here: headless, as root, offline (no calls home).
CHROMIUM_ARGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
]


def chromium_path() -> str:
    found = shutil.which("chromium") or "/usr/bin/chromium"
    if not Path(found).exists():
        raise RuntimeError("chromium is missing: apt-get install chromium (make test installs it)")
    return found


def need_browser(tool: str) -> None:
    """Playwright and chromium, or one line saying how to install them and exit 2 (call before starting anything)."""
    need_module("playwright.sync_api", "Playwright (a dev requirement)", DEV_EXTRAS, tool=tool)
    try:
        chromium_path()
    except RuntimeError:
        raise missing("chromium", "sudo apt-get install chromium", tool=tool) from None


def launch(playwright: Playwright) -> Browser:
    """Debian's chromium, headless, with a fresh temporary profile."""
    return playwright.chromium.launch(executable_path=chromium_path(), headless=True, args=CHROMIUM_ARGS)
