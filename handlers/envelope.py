"""The response envelope every workload and /async response carries."""

from __future__ import annotations

import time
from typing import Any


def _ms(seconds: float) -> float:
    return round(seconds * 1000, 3)


def _ms_or_none(seconds: float | None) -> float | None:
    return None if seconds is None else _ms(seconds)


def envelope(
    *,
    mode: str,
    workload: str,
    params: dict[str, Any],
    result: Any,
    server_pid: int,
    task_id: int | None,
    worker_pid: int,
    worker_thread: str,
    received: float,
    started: float,
    finished: float,
    cpu: float | None,
    core_wait: float | None,
    blocked: float | None,
    gil_wait: float | None,
    worker_address: str | None = None,
    worker_interpreter: int | None = None,
) -> dict[str, Any]:
    """`server` handled the HTTP request; `worker` is where the work ran.

    `started`/`finished` come from the worker itself, so `queued_ms` is the
    real wait for a pool (or for the event loop) and `run_ms` the real run.
    `cpu_ms` is the CPU time the run used where it ran (None where nothing
    ran: /async only waits); the rest of run_ms it was started but not
    running: `core_wait_ms` waiting for a core (the kernel's run queue) and
    `blocked_ms` the rest, of which `gil_wait_ms` is the part that was the
    GIL: all of it on a thread that shares its GIL, 0 on one alone with its
    own (workloads/clocks.py; None where it cannot be told). A cluster worker
    (distributed mode) also has an address, a sub-interpreter (interpreters
    mode) its interpreter id.
    """
    responded = time.time()
    worker: dict[str, Any] = {"pid": worker_pid, "thread": worker_thread}
    if worker_address is not None:
        worker["address"] = worker_address
    if worker_interpreter is not None:
        worker["interpreter"] = worker_interpreter
    return {
        "mode": mode,
        "workload": workload,
        "params": params,
        "result": result,
        "server": {"pid": server_pid, "task_id": task_id},
        "worker": worker,
        "timing": {
            "received": received,
            "started": started,
            "finished": finished,
            "queued_ms": _ms(started - received),
            "run_ms": _ms(finished - started),
            "cpu_ms": _ms_or_none(cpu),
            "core_wait_ms": _ms_or_none(core_wait),
            "blocked_ms": _ms_or_none(blocked),
            "gil_wait_ms": _ms_or_none(gil_wait),
            "total_ms": _ms(responded - received),
        },
    }
