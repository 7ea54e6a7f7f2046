"""Facts of the machine the lab runs on that every layer may read: the CPUs this process may use."""

from __future__ import annotations

import os


def cpu_count() -> int:
    """CPUs this process may run on (affinity-aware, unlike os.cpu_count)."""
    if hasattr(os, "sched_getaffinity"):
        return len(os.sched_getaffinity(0))
    return os.cpu_count() or 1
