"""Skip marks for what a build lacks: a GIL (free-threaded 3.13t, make test-ft), or an optional dependency."""

from __future__ import annotations

import importlib.util

import pytest

from lab.instruments.freethreading import free_threaded_build
from workloads.clocks import gil_enabled

# Tests of what a GIL does (threads taking turns, a probe waiting for it, the GIL's part of a run).
needs_gil = pytest.mark.skipif(not gil_enabled(), reason="shows what a GIL does; this interpreter runs without one")
free_threaded = pytest.mark.skipif(
    not free_threaded_build(), reason="needs a free-threaded build (make python-ft; make test-ft)"
)
needs_matplotlib = pytest.mark.skipif(
    importlib.util.find_spec("matplotlib") is None, reason="draws charts: needs matplotlib (none for 3.13t)"
)
