"""Run in each worker of the embedded Dask cluster as it starts (its nanny's preload), never imported elsewhere.

- It ignores SIGINT: the workers are stopped through their nannies, never by
  a terminal's Ctrl-C to a process group (which once made each print a
  KeyboardInterrupt traceback).
- Every PRUNE_EVERY_S it forgets the worker's cumulative metrics kept per
  span. Dask adds each span's id to their keys (`digests_total`,
  `digests_max`) and never clears them (dask/distributed#7977), and each
  request the lab sends on its own is a span: over an hour of /distributed
  the worker's memory grew with them. Nothing of the lab reads them (the
  same metrics summed over spans go to the scheduler with every heartbeat).
"""

from __future__ import annotations

import asyncio
import signal
from typing import Any

from distributed.spans import CONTEXTS_WITH_SPAN_ID

PRUNE_EVERY_S = 30.0

signal.signal(signal.SIGINT, signal.SIG_IGN)  # as the worker starts, before its nanny has it serve


def forget_span_metrics(worker: Any) -> int:
    """Drop the worker's cumulative metrics that carry a span's id; how many keys went."""
    dropped = 0
    for table in (worker.digests_total, worker.digests_max):
        for key in [key for key in table if isinstance(key, tuple) and key and key[0] in CONTEXTS_WITH_SPAN_ID]:
            del table[key]
            dropped += 1
    return dropped


async def _now_and_then(worker: Any) -> None:
    while True:
        await asyncio.sleep(PRUNE_EVERY_S)
        forget_span_metrics(worker)


async def dask_setup(worker: Any) -> None:
    """Dask's preload hook, awaited on the worker's event loop once it has started."""
    worker.lab_pruning = asyncio.ensure_future(_now_and_then(worker))  # kept: a task only the loop holds may go
