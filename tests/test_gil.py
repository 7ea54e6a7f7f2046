"""`releases_gil` in /workloads is measured here, not asserted from memory.

Two threads run the workload at once, and each measures the CPU time it
used. If the workload holds the GIL, only one thread computes at a time, so
the wall time is at least the CPU time of both (ratio >= ~1). If it releases
the GIL, both compute together on two cores and the wall time is about half
(ratio ~0.5). Other load on the machine can only make the wall time longer,
so a holder can never look like a releaser; a releaser that looks like a
holder (a neighbour took the second core) gets two more tries.

Workloads that wait rather than compute (sleep) use almost no CPU; for them
the two threads' wall time is compared with one run alone.
"""

from __future__ import annotations

import threading
import time
from typing import Any

import pytest

from lab.config import cpu_count
from workloads import WORKLOADS

# Sized to run ~0.1-0.3 s each: long enough for the GIL to show, short for CI.
SIZES: dict[str, dict[str, Any]] = {
    "count": {"n": 4_000_000},
    "fib": {"n": 28},
    "matmul": {"n": 600, "repeat": 8},
    "train": {"dataset": "digits", "trees": 60},
    "predict": {"rows": 15_000},
    "sleep": {"seconds": 0.15},
}
RELEASES_BELOW = 0.75
HOLDS_ABOVE = 0.85


def _wall_per_cpu(name: str) -> float:
    func, params = WORKLOADS[name].func, SIZES[name]
    func(**params)  # warm caches: the datasets, the predict model
    cpu = [0.0, 0.0]

    def run(i: int) -> None:
        start = time.thread_time()
        func(**params)
        cpu[i] = time.thread_time() - start

    threads = [threading.Thread(target=run, args=(i,)) for i in range(2)]
    start = time.perf_counter()
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    wall = time.perf_counter() - start
    if sum(cpu) > 0.2 * wall:
        return wall / sum(cpu)
    start = time.perf_counter()  # waiting, not computing: compare with one run alone
    func(**params)
    return wall / (2 * (time.perf_counter() - start))


def test_every_workload_is_sized_here() -> None:
    assert set(SIZES) == set(WORKLOADS)


@pytest.mark.slow
@pytest.mark.parametrize("name", list(WORKLOADS))
def test_declared_gil_behaviour_matches_measurement(name: str) -> None:
    declared = WORKLOADS[name].releases_gil
    if not declared:
        ratio = _wall_per_cpu(name)
        assert ratio > HOLDS_ABOVE, f"{name} declares it holds the GIL, but two threads overlapped ({ratio:.2f})"
        return
    if name != "sleep" and cpu_count() < 2:
        pytest.skip("computation cannot overlap on one core")
    ratios = []
    for _ in range(3):
        ratios.append(round(_wall_per_cpu(name), 2))
        if ratios[-1] < RELEASES_BELOW:
            return
    pytest.fail(f"{name} declares it releases the GIL, but two threads never overlapped: {ratios}")
