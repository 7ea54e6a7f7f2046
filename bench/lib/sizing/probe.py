"""Step 1 of the advisor: the request measured alone, two at once and eight at once, in one process.

Alone (one user, one request at a time): how long it takes, its CPU from
outside (the serving process's CPU over the requests, its idle background
taken off: the HTTP path's CPU too, not the work's only), its run-queue
time (schedstat), and, on a lab route, the envelopes' own split: cpu_ms,
core_wait_ms, blocked_ms, gil_wait_ms and the time waited on purpose
(io_wait_ms). Two at once (two threads overlap): how long a request waited
for the other thread, which is the GIL (the lab's gil_wait_ms; for a WSGI
app, the time a request took beyond its time alone that was not spent
waiting for a core). Eight at once: the process's throughput with its
threads busy, whose inverse bounds the GIL-held time of a request (one GIL
lets one request's GIL-held work run at a time). Memory: RSS, USS and PSS
of the process after each. Every phase also takes this process's CPU a request: the load
generator's, which shares the cores with the server while it is measured.

Then a second server of one process with one thread, QUEUED_USERS users
back to back, so that a request is always waiting for the thread: the time
a request takes there beyond its CPU and its wait is the server's hand-off
(the thread idles while its event loop, or its accept thread, passes the
next request on): one thread a process leaves that much of every request
to idle cores, which a second thread fills. Its USS is a process's own with
one thread; what the eight busy threads had beyond it, each thread's.
"""

from __future__ import annotations

import json
import statistics
import time
from pathlib import Path
from typing import Any

from bench.lib.sizing import outside, traffic
from bench.lib.sizing.model import Memory, Point, Split
from bench.lib.sizing.targets import InputError, Server, Target, start
from lab.race.engine import get
from lab.race.stats import percentile

BUSY_USERS = 8  # enough threads that a GIL-bound process's GIL is always wanted (1 + wait/cpu below ~4)
PROBE = Point(1, BUSY_USERS)
QUEUED = Point(1, 1)
QUEUED_USERS = 4  # more than its one thread: a request is always queued for it
TIMING = ("queued_ms", "run_ms", "cpu_ms", "core_wait_ms", "blocked_ms", "gil_wait_ms", "io_wait_ms", "total_ms")


def _median(values: list[float | None]) -> float | None:
    known = [v for v in values if v is not None]
    return round(statistics.median(known), 3) if known else None


def envelopes(tally: traffic.Tally) -> dict[str, float | None]:
    """The lab envelopes' timing, each field's median over the answers (None where no answer had it)."""
    timings = []
    for answer in tally.ok:
        try:
            timings.append(json.loads(answer.body).get("timing", {}))
        except (ValueError, AttributeError):
            continue
    return {key: _median([t.get(key) for t in timings]) for key in TIMING}


def phase(server: Server, users: int, seconds: float, background: float) -> dict[str, Any]:
    """`users` back to back for `seconds`: latency, and per request the CPU (less the background), run queue and
    context switches of the serving processes; the envelopes' split on a lab route."""
    processes = server.serving()
    before, client_before = outside.counters(processes), time.process_time()
    tally = traffic.closed(server.url, users, seconds, warmup_s=0.3, keep_bodies=server.target.kind == "lab")
    used, client_s = outside.counters(processes) - before, time.process_time() - client_before
    if not tally.ok:
        raise RuntimeError(f"no request to {server.url} was answered with 2xx in {seconds:g} s")
    count = tally.served
    times = [1000 * a.seconds for a in tally.ok]
    return {
        "users": users,
        "answers": len(tally.ok),
        "rps": round(len(tally.ok) / tally.window_s, 2),
        "failed": tally.failed,
        "median_ms": round(statistics.median(times), 2),
        # Over the requests the counters below are shared among (the warm-up's too), so that one can be taken
        # from the other: a stall of a second in a short phase raises the mean run queue and the mean time
        # alike, where it leaves the median time as it was.
        "mean_ms": round(1000 * tally.busy_s / count, 3),
        "variation": round(statistics.pvariance(times) / statistics.fmean(times) ** 2, 4),
        "p95_ms": round(percentile(times, 0.95) or 0.0, 2),
        "cpu_ms": round(1000 * max(0.0, used.cpu_s - background * used.at) / count, 3),
        "client_cpu_ms": round(1000 * client_s / count, 3),  # the load generator's (this process's)
        # The window's time with no request in flight, a request answered: the load generator late to send.
        "unsent_ms": round(1000 * tally.unsent_s / len(tally.ok), 3),
        "run_queue_ms": round(1000 * used.run_queue_s / count, 3),
        "switches": round(used.switches / count, 2),
        "envelope": envelopes(tally) if server.target.kind == "lab" else None,
        "memory": outside.memory(processes),
    }


def split_of(target: Target, alone: dict[str, Any], busy: dict[str, Any], queued: dict[str, Any]) -> Split:
    """The model's split: from the alone phase the CPU from outside (at least the envelope's) and the wait on
    purpose (the envelope's io_wait_ms, else its blocked time alone, else the mean time that was neither CPU nor
    core wait, all three means over the same requests); from the busy phase the GIL-held CPU, at most 1 / its
    throughput (one GIL: one request's GIL-held work at a time, so a process whose threads all want it answers at
    most 1 / gil a second) and at most the CPU, and the load generator's CPU a request; from the queued phase (one
    thread, always a request waiting for it) the hand-off: its time a request, 1 / its throughput, beyond the CPU,
    the wait, the server's wait for a core and the time nothing was in flight."""
    seen = alone["envelope"] or {}
    cpu = max(alone["cpu_ms"], seen.get("cpu_ms") or 0.0, 0.001)
    if target.kind == "lab":
        wait = seen.get("io_wait_ms")
        wait = seen.get("blocked_ms") if wait is None else wait
    else:
        wait = alone["mean_ms"] - alone["cpu_ms"] - alone["run_queue_ms"]  # all three over the same requests
    gil = min(cpu, 1000 / busy["rps"]) if busy["rps"] > 0 else cpu
    wait = max(0.0, wait or 0.0)
    # (Less its time queued for a core: on a small machine the load generator's CPU takes turns with the
    # server's, and is budgeted in the cores bound already, client_cpu_ms. Less the time nothing was in flight:
    # a load generator stalled a quarter of a second left the server nothing to take, which is not its hand-off.)
    not_the_servers = queued["run_queue_ms"] + queued.get("unsent_ms", 0.0)
    handoff = max(0.0, 1000 / queued["rps"] - cpu - wait - not_the_servers) if queued["rps"] > 0 else 0.0
    return Split(round(cpu, 3), round(max(gil, 0.001), 3), round(wait, 3), alone["median_ms"], alone["variation"],
                 round(handoff, 3), busy["client_cpu_ms"])  # fmt: skip


def memory_of(alone: dict[str, Any], busy: dict[str, Any], queued: dict[str, Any]) -> Memory:
    """Shared pages; a process's own (USS) with one thread, the one-thread server's; and each thread more's: what
    the probe's process, its BUSY_USERS threads all busy, had beyond that, per thread (>= 0). Counted in busy
    threads, not started ones: the lab starts its pool's threads with the server, a gthread worker as requests
    come, and a thread costs mostly what it allocates while it works."""
    base, full = queued["memory"]["uss_mb"], busy["memory"]["uss_mb"]
    more = busy["users"] - QUEUED.threads
    per_thread = max(0.0, (full - base) / more) if more > 0 else 0.0
    return Memory(alone["memory"]["shared_mb"], base, round(per_thread, 2))


def low_load_gil_ms(target: Target, alone: dict[str, Any], low: dict[str, Any]) -> float | None:
    """How long a request waited for the other thread at low load: the lab's gil_wait_ms, or from outside the
    time beyond alone that was not a wait for a core."""
    if target.kind == "lab":
        seen = (low["envelope"] or {}).get("gil_wait_ms")
        return None if seen is None else float(seen)
    extra = float(low["mean_ms"] - alone["mean_ms"] - (low["run_queue_ms"] - alone["run_queue_ms"]))
    return round(max(0.0, extra), 3)


def workload_traits(server: Server, workload: str) -> dict[str, Any]:
    """The lab's /workloads entry for `workload` ({} for a WSGI app)."""
    if server.target.kind != "lab":
        return {}
    status, listed, _, _ = get(f"{server.running.url}/workloads", 10.0)
    found = [w for w in listed if w.get("name") == workload] if status == 200 and isinstance(listed, list) else []
    return found[0] if found else {}


def queued_phase(target: Target, folder: Path, upstream: str, seconds: float) -> dict[str, Any]:
    """QUEUED_USERS users on a server of one process with one thread (always stopped): its throughput with a
    request always waiting, the hand-off's evidence."""
    server = start(target, QUEUED, folder, upstream)
    try:
        get(server.url, 120.0)  # warm
        return phase(server, QUEUED_USERS, seconds, outside.cpu_rate(server.serving, 0.5))
    finally:
        server.stop()


def measure(target: Target, folder: Path, upstream: str, *, quick: bool) -> dict[str, Any]:
    """The split, the memory and the evidence, from one server of one process (always stopped)."""
    server = start(target, PROBE, folder, upstream)
    try:
        status, _, sent, received = get(server.url, 120.0)  # the first request: a warm-up, and how long one takes
        if not 200 <= status < 300:
            raise InputError(f"--path {target.path!r}: {target.name} answered {status}; give a path it answers 2xx")
        seconds = min(20.0, max(1.0 if quick else 2.0, (4 if quick else 8) * (received - sent)))
        background = outside.cpu_rate(server.serving, 0.5 if quick else 1.0)
        alone = phase(server, 1, seconds, background)
        low = phase(server, 2, seconds, background)
        busy = phase(server, BUSY_USERS, seconds, background)
        traits = workload_traits(server, target.workload)
        stats = get(f"{server.running.url}/stats", 10.0)[1] if target.kind == "lab" else {}
    finally:
        server.stop()
    queued = queued_phase(target, folder, upstream, seconds)
    return {
        "split": split_of(target, alone, busy, queued),
        "memory": memory_of(alone, busy, queued),
        "alone": alone,
        "low_load": low,
        "busy": busy,
        "queued": queued,
        "gil_wait_ms_two_threads": low_load_gil_ms(target, alone, low),
        "traits": traits,
        "native_threads": (stats.get("server", {}) if isinstance(stats, dict) else {}).get("native_threads")
        if target.kind == "lab"
        else target.facts.get("native_threads"),
        "measured_at": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
    }
