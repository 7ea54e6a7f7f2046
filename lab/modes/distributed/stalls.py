"""A deadline that counts only the time this event loop ran on time: what our side of an exchange had.

The Dask client runs on the server's own event loop. A /blocking run holds
that loop, and back-to-back runs hold it for seconds with a turn or two
between them; a round trip to the scheduler needs several turns of it, so
by the wall clock it took seconds although nothing was lost. Counted as
this loop's own time, a stall (a blocking run, a starved CPU) costs the
deadline at most two slices, while a scheduler that is really gone, with
the loop turning freely, still runs the deadline out at the wall clock's pace.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable
from typing import TypeVar

T = TypeVar("T")

SLICE_S = 0.1


async def within_awake(work: Awaitable[T], seconds: float, slice_s: float = SLICE_S) -> T:
    """`work`'s result, or TimeoutError once the loop has turned on time for `seconds` without it (cancelled)."""
    task = asyncio.ensure_future(work)
    loop = asyncio.get_running_loop()
    awake = 0.0
    try:
        while True:
            began = loop.time()
            done, _ = await asyncio.wait({task}, timeout=slice_s)
            if done:
                return task.result()
            # A slice the loop could not end on time was a stall: it counts as two slices at most.
            awake += min(loop.time() - began, 2 * slice_s)
            if awake >= seconds:
                raise TimeoutError(f"no answer in {seconds:g} s of this event loop's own time")
    finally:
        if not task.done():
            task.cancel()
