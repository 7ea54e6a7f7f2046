"""A request that computes, then waits: the dial between CPU-bound and I/O-bound work."""

from __future__ import annotations

import time

from workloads.waits import asleep, sleep

# One chunk of the computing: about 0.1 ms of Python bytecode between two reads of the thread's CPU
# clock (a system call of about 2 us), so that the reads cost about 2 % and the run stops within a chunk.
CHUNK = 2_000


def compute(ms: float) -> int:
    """Pure-Python work until this thread's CPU clock has advanced `ms` milliseconds; the chunks run.

    The clock is the thread's own (`time.thread_time`): it moves only while
    this thread computes, so the work holds the GIL for `ms` of CPU whatever
    the host's speed and however long other threads keep the GIL or other
    processes the core. How many chunks that takes depends on the host;
    what the run returns does not.
    """
    end = time.thread_time() + ms / 1000
    chunks = 0
    while time.thread_time() < end:
        i = 0
        while i < CHUNK:  # the counting loop of `count`, a chunk at a time
            i += 1
        chunks += 1
    return chunks


def mix(compute_ms: float, wait_ms: float) -> float:
    """`compute_ms` of CPU in pure Python (holding the GIL), then `wait_ms` of time.sleep (without it).

    Returns the milliseconds asked for, computing and waiting: the same on any host.
    """
    compute(compute_ms)
    sleep(wait_ms / 1000)
    return compute_ms + wait_ms


async def amix(compute_ms: float, wait_ms: float) -> float:
    """`mix` on an event loop: the computing on the loop's thread, then `wait_ms` of asyncio.sleep."""
    compute(compute_ms)
    await asleep(wait_ms / 1000)
    return compute_ms + wait_ms


# (workload, params, expected result): the tests parametrize over these.
KNOWN_ANSWERS: list[tuple[str, dict[str, float], float]] = [
    ("mix", {"compute_ms": 0.0, "wait_ms": 0.0}, 0.0),
    ("mix", {"compute_ms": 5.0, "wait_ms": 0.0}, 5.0),
    ("mix", {"compute_ms": 0.0, "wait_ms": 5.0}, 5.0),
    ("mix", {"compute_ms": 3.0, "wait_ms": 7.0}, 10.0),
]
