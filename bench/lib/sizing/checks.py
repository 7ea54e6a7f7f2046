"""Step 6 of the advisor: misconfigurations it can see, each a sentence saying what to do.

- BLAS/OpenMP pools (threadpoolctl's view of the server) whose threads,
  times the processes, outnumber the usable cores: they take turns on the
  cores the processes already fill.
- A CPU quota (or an affinity) below the CPUs the host shows: anything
  sized by os.cpu_count() is oversized.
- A pool created before a fork: threads or processes an app starts when it
  is imported are not copied into the workers of a server that forks after
  importing it (gunicorn --preload, uWSGI without lazy-apps), and a forking
  parent that runs threads of its own forks them half-copied.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from lab.machine import Cores


def native_pools(native: Sequence[dict[str, Any]] | None, processes: int, cores: Cores) -> list[str]:
    """A warning per BLAS/OpenMP library whose threads in `processes` processes exceed the usable cores."""
    found = []
    seen = set()
    for pool in native or []:
        threads = int(pool.get("num_threads") or 1)
        name = pool.get("internal_api") or pool.get("user_api") or "a native pool"
        if name in seen or threads * processes <= cores.usable:
            continue
        seen.add(name)
        found.append(
            f"{name} runs {threads} threads in each process: x {processes} processes = {threads * processes} "
            f"on {cores.usable} usable cores; cap it at {max(1, cores.usable // processes)} "
            f"(OMP_NUM_THREADS / OPENBLAS_NUM_THREADS, or threadpoolctl's threadpool_limits)"
        )
    return found


def quota(cores: Cores) -> list[str]:
    """The ways the usable cores differ from os.cpu_count(), each a warning."""
    return [f"{note}" for note in cores.differences()]


def before_fork(app_facts: dict[str, Any], master_threads: Sequence[int | None]) -> list[str]:
    """Threads or processes started at import (a WSGI app), or threads in a forking parent (any server)."""
    found = []
    threads, children = int(app_facts.get("threads", 1)), int(app_facts.get("children", 0))
    if threads > 1 or children > 0:
        found.append(
            f"the app starts {threads - 1} thread(s) and {children} process(es) when it is imported: a server that "
            f"imports it before forking (gunicorn --preload, uWSGI without lazy-apps) leaves them behind in the "
            f"parent (a pool created before a fork); create pools after the fork (post_fork, or on first use)"
        )
    busy = max((t for t in master_threads if t is not None), default=1)
    if busy > 1:
        found.append(
            f"a forking parent ran {busy} threads: a child forked from it gets a copy of their locks but not the "
            f"threads (a pool created before a fork)"
        )
    return found
