"""Each of the lab's instruments alone: microseconds per call, in this process (bench.overhead --parts instruments).

What a request or a tick of the server pays for each thing the lab
measures or keeps: the clocks, a schedstat read, the core and GIL meters'
readings, the stats board's write, the request counters, the occupancy, a
request's life, the envelope (and as JSON), an access-log line. Each is called in a tight loop, `repeat`
times in turn (round-robin, so a slow moment of a shared host falls on
all), and the median per call is kept. What microseconds do not show is
how often a call lets go of the GIL (each system call made with it
released): under GIL load each of those waits a switch interval or more
before the caller runs on (docs/instruments.md counts them with strace).
"""

from __future__ import annotations

import io
import logging
import statistics
import threading
import time
from collections.abc import Callable
from typing import Any

from lab import logs
from lab.instruments.cores import CoreMeter
from lab.instruments.gil import GilMeter
from lab.instruments.stats import Board, RequestStats
from lab.runs import Run, envelope
from lab.web.json_handler import to_json
from lab.web.lifecycle import Lifecycle
from lab.web.occupancy import Occupancy
from workloads.clocks import THREAD, own_threads_schedstat, thread_core_wait, threads_schedstat
from workloads.registry import run_timed

# Idle threads beside the caller while the meters read: a server process has about this many
# (the loop, six pool threads, the GIL meter's and the process pool's helpers).
SERVER_THREADS = 12


def _board_doc(modes: int = 6) -> dict[str, Any]:
    """A slot's document the size of a busy server's: every mode counted, a pool snapshot each."""
    stats = RequestStats()
    for index in range(modes):
        for status in (200, 499, 503):
            stats.record(f"mode{index}", status, 0.01 * (index + 1), 0.001)
    pool = {"kind": "threads", "size": 6, "running": 0, "waiting": 0, "max_pending": 100, "busy_workers": [],
            "longest_running_s": None, "submitted": 10, "rejected": 0, "timed_out": 0}  # fmt: skip
    return {"pid": 1, "task_id": None, "started": time.time(), "restarts": 0, "active_requests": 0,
            "gil_contention": 0.0, "core_wait": 0.0, "requests": stats.modes,
            "pools": {f"mode{i}": dict(pool) for i in range(modes)}, "published": time.time()}  # fmt: skip


def _occupy(occupancy: Occupancy) -> None:
    occupancy.hold("connection", 1.0)
    occupancy.move("connection", "request", 0.5)
    occupancy.release("request")


def _life(lifecycle: Lifecycle) -> None:
    life = lifecycle.begin(object())
    life.classify("threading")
    life.claim(1 / 6)
    life.ran(0.000_01)
    life.end(200)
    life.left()


def _access_line() -> Callable[[], object]:
    """One access-log line as the server makes it (handlers/app.py), written to memory, one by one (no event
    loop runs here to hold them): a logger of its own, so that nothing reaches this process's stderr. The
    logging flags the server sets (lab/logs.py's lean_records) are set for this whole process."""
    logs.lean_records()
    handler = logs.bounded(logs.BatchedHandler())
    handler.setStream(io.StringIO())
    logger = logging.Logger("tornado.access")
    logger.addHandler(handler)
    return lambda: logger.info("%d %s %s %.1fms%s", 200, "GET", "/threading/count?n=1", 0.31, "")


def _calls(gil: GilMeter) -> dict[str, Callable[[], object]]:
    """Each instrument's one call (`gil`: a started meter)."""
    board, doc, stats, occupancy = Board(1), _board_doc(), RequestStats(), Occupancy()
    lifecycle = Lifecycle(RequestStats(), lambda active: None)
    cores = CoreMeter()
    record = run_timed("count", {"n": 1})
    run = Run("threading", "count", {"n": 1})
    return {
        "time.time()": time.time,
        "thread CPU clock": THREAD.cpu,
        "schedstat, this thread": thread_core_wait,
        "schedstat, every thread": threads_schedstat,
        "schedstat, every thread, files kept open": own_threads_schedstat,
        "core meter reading": cores.read,
        "GIL meter reading": gil.read,
        "request counters": lambda: stats.record("threading", 200, 0.001, 0.000_01),
        "occupancy": lambda: _occupy(occupancy),
        "a request's life": lambda: _life(lifecycle),
        "stats board write": lambda: board.write(0, doc),
        "envelope": lambda: envelope(run, record, received=time.time(), pid=1, task_id=None),
        "envelope as JSON": lambda: to_json(envelope(run, record, received=time.time(), pid=1, task_id=None)),
        "access-log line (made)": _access_line(),
        "timed run of count(1)": lambda: run_timed("count", {"n": 1}),
    }


def instrument_costs(repeat: int = 5, calls: int = 2000) -> list[dict[str, Any]]:
    """Per instrument: the median microseconds per call over `repeat` loops of `calls` calls, round-robin."""
    stop = threading.Event()
    idle = [threading.Thread(target=stop.wait, daemon=True) for _ in range(SERVER_THREADS - 1)]
    for thread in idle:
        thread.start()
    # Stopped before this process ends: its sampling thread, left to run into the interpreter's exit, can be
    # caught taking the GIL there and abort the process ("FATAL: exception not rethrown").
    gil = GilMeter()
    gil.start()
    try:
        measured = _calls(gil)
        samples: dict[str, list[float]] = {name: [] for name in measured}
        for _ in range(repeat):
            for name, call in measured.items():
                began = time.perf_counter()
                for _ in range(calls):
                    call()
                samples[name].append(1e6 * (time.perf_counter() - began) / calls)
    finally:
        gil.stop()
        stop.set()
    return [{"instrument": name, "us_per_call": round(statistics.median(samples[name]), 2)} for name in measured]
