"""The race engine: N requests released together at one mode of a lab server, /ping probed meanwhile.

Every request goes out at the same instant (a barrier releases N threads,
each on its own connection, as siege does); with reps R each of them then
sends R - 1 more, one after another (siege -c N -r R). Meanwhile a probe
thread sends GET /ping every few milliseconds and records how long each
took, and the server's GIL contention the answer reports: the server's
responsiveness while the race runs. Solo requests before the race measure
the single-run time `t` (their median, their spread is the noise) that the
ideal makespan is computed from (bench/ideal.py); where several runs could
go at once, this machine's parallel capacity is measured too
(bench/capacity.py), for the ideal it can really reach.

bench/race.py is its command line; bench/sweep.py, bench/siege_steps.py and
(through `python -m bench.race --jsonl`) the lab page use it too. EVENTS
below are what `on_event` sees and what --jsonl prints, one per line.
"""

from __future__ import annotations

import http.client
import json
import math
import sys
import threading
import time
import urllib.error
import urllib.parse
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field
from typing import Any

from bench import capacity as machine
from bench.ideal import ideal_makespan, ideal_words, lanes, reachable_makespan
from bench.summary import median
from lab import loopback
from lab.modes import MODES, make_facts

EVENTS = """
{"event": "race", "url", "mode", "workload", "params", "concurrency", "solo_s", "server": {...},
                  "solo_samples_s": [...], "solo_runs", "reps", "capacity": {...} or null}
{"event": "response", "index", "sent", "received", "status", "body"}   one per request, as it completes
{"event": "ping", "sent", "received", "ms", "status", "gil"}            one per probe (--ping-batch 0)
{"event": "pings", "count", "failed", "from", "to", "p50_ms", "max_ms",
                   "worst": {"sent", "received", "ms"}, "gil"}          or one per --ping-batch seconds
{"event": "done", "summary": {...}}                                      see Summary
{"event": "error", "message"}                                            the race could not run
"""

Event = dict[str, Any]


@dataclass
class Response:
    index: int
    sent: float
    received: float
    status: int
    body: Any

    @property
    def seconds(self) -> float:
        return self.received - self.sent


@dataclass
class Ping:
    sent: float
    received: float
    ms: float
    status: int
    # The answering process's GIL contention lately, as /ping reports it (None: not measured).
    gil: float | None = None


@dataclass
class Summary:
    mode: str
    workload: str
    concurrency: int
    solo_s: float
    elapsed_s: float
    mean_s: float
    shortest_s: float
    longest_s: float
    transactions: int
    failed: int
    ideal_s: float
    ratio: float
    cores: int
    processes: int
    lanes: int | None
    worker_pids: list[int] = field(default_factory=list)
    server_pids: list[int] = field(default_factory=list)
    # Answered requests per server process (pid as text, JSON's keys): how a forked server spread them.
    spread: dict[str, int] = field(default_factory=dict)
    ping_count: int = 0
    ping_p50_ms: float | None = None
    ping_p99_ms: float | None = None
    ping_max_ms: float | None = None
    # More context for tables and charts; the page reads only what it needs.
    url: str = ""
    params: dict[str, str] = field(default_factory=dict)
    solo_samples_s: list[float] = field(default_factory=list)
    started_at: float = 0.0
    p95_s: float = 0.0
    throughput_rps: float = 0.0
    reps: int = 1
    # The ideal in plain words (bench/ideal.py), for the page's summary.
    ideal_words: str = ""
    # Noise: (slowest - fastest) / median of the solo runs t comes from.
    solo_spread: float = 0.0
    # This machine's parallel capacity (bench/capacity.py), where runs could go at once: how much
    # longer one of `cores` runs took when all went together, and the ideal that leaves reachable.
    slowdown: float | None = None
    reachable_ideal_s: float | None = None
    reachable_ratio: float | None = None
    # Computing against waiting: CPU time over run time of the answered runs (1.0: every run
    # computed all the time it was started; 0.25: it waited three quarters of it, for the GIL or a core).
    cpu_share: float | None = None
    # The server's GIL contention as the /ping probes saw it (None where not measured).
    gil_p50: float | None = None
    gil_max: float | None = None


def spread_of(pids: Sequence[int]) -> dict[str, int]:
    """How many requests each server process answered, the busiest first."""
    return {str(pid): count for pid, count in Counter(pids).most_common()}


def ran(mode: str, workload: str) -> str:
    """What a race of `mode` runs, as its envelopes name it (async: "upstream", not the workload)."""
    return MODES[mode].workload or workload


def get(url: str, timeout: float) -> tuple[int, Any, float, float]:
    """(status, parsed JSON body or text, sent, received) for one GET on a fresh connection."""
    sent = time.time()
    try:
        with loopback.urlopen(url, timeout=timeout) as reply:
            status, raw = reply.status, reply.read()
    except urllib.error.HTTPError as error:
        status, raw = error.code, error.read()
    except (OSError, http.client.HTTPException) as error:  # refused, reset, or a reply cut short
        return 0, {"error": {"status": 0, "message": str(error) or type(error).__name__}}, sent, time.time()
    received = time.time()
    try:
        return status, json.loads(raw), sent, received
    except ValueError:
        return status, raw.decode(errors="replace"), sent, received


def percentile(values: Sequence[float], q: float) -> float | None:
    """Nearest-rank percentile (q in 0..1); None for no values."""
    if not values:
        return None
    ordered = sorted(values)
    return ordered[max(0, min(len(ordered) - 1, math.ceil(q * len(ordered)) - 1))]


def mode_url(base: str, mode: str, workload: str | None, params: dict[str, str]) -> str:
    """The URL one request of this race goes to (workload None: the route's default)."""
    path = f"/{mode}/{workload}" if workload and MODES[mode].runs_workloads else f"/{mode}"
    query = urllib.parse.urlencode(params)
    return f"{base.rstrip('/')}{path}" + (f"?{query}" if query else "")


def with_tag(url: str, tag: str) -> str:
    """The same request with `_=tag` (ignored by the server) so every URL is distinct."""
    return f"{url}{'&' if '?' in url else '?'}_={tag}"


def server_facts(base: str, timeout: float) -> dict[str, Any]:
    status, body, _, _ = get(f"{base}/stats", timeout)
    if status != 200 or not isinstance(body, dict):
        raise RuntimeError(f"{base}/stats answered {status}: is this a lab server?")
    status, workloads, _, _ = get(f"{base}/workloads", timeout)
    listed = workloads if status == 200 and isinstance(workloads, list) else []
    return make_facts(body["server"], listed)


def solo_samples(url: str, runs: int, timeout: float) -> tuple[list[float], Any]:
    """Client-side seconds of `runs` requests sent one at a time, and the last reply's body."""
    samples: list[float] = []
    body: Any = None
    for run in range(runs):
        status, body, sent, received = get(with_tag(url, f"solo{run}"), timeout)
        if status != 200:
            raise RuntimeError(f"solo request to {url} failed with {status}: {body}")
        samples.append(received - sent)
    return samples, body


def warm_up(url: str, concurrency: int, seconds: float, timeout: float) -> int:
    """Send rounds of `concurrency` simultaneous requests for at least `seconds`; how many were sent.

    At least one round. Several seconds of load matter on virtual machines
    whose CPUs speed up under sustained load: measured here, one `count` run
    took 0.4 s on a CPU idle a moment before and 0.25 s about three seconds
    into steady load, which would skew `t` and every ratio built on it.
    """
    deadline = time.monotonic() + seconds
    sent = 0
    while True:
        tags = [with_tag(url, f"warmup{sent + i}") for i in range(concurrency)]
        threads = [threading.Thread(target=_check_ok, args=(tag, timeout), daemon=True) for tag in tags]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
        sent += concurrency
        if time.monotonic() >= deadline:
            return sent


def _check_ok(url: str, timeout: float) -> None:
    status, body, _, _ = get(url, timeout)
    if status != 200:
        print(f"warning: warm-up request {url} answered {status}: {str(body)[:200]}", file=sys.stderr)


def race(
    base: str,
    mode: str,
    workload: str,
    params: dict[str, str],
    concurrency: int,
    *,
    ping_every: float = 0.005,
    ping_batch: float = 0.0,
    timeout: float = 300.0,
    solo_runs: int = 3,
    reps: int = 1,
    warmup_s: float = 0.0,
    measure_capacity: bool = True,
    on_event: Callable[[Event], None] | None = None,
    url: str | None = None,
    server: dict[str, Any] | None = None,
    solo_after: bool = False,
) -> tuple[Summary, list[Response], list[Ping]]:
    """Run one race; `on_event` sees every event as it happens (for streaming and progress).

    `concurrency` clients start together; each sends `reps` requests one
    after another (like siege -c C -r R), so there are concurrency x reps
    responses, indexed client x reps + rep.

    Events come from several threads; they are passed to `on_event` one at a
    time, so a consumer writing lines never interleaves two of them. With
    `ping_batch` > 0 the probes are reported as one "pings" event per that
    many seconds (a page drawing them need not see each of hundreds).

    With `solo_after`, `t` is the median of solo runs before the race and as
    many after it (as bench/siege.sh does): on a host whose speed drifts,
    runs timed on both sides of the race stand for it better than runs
    before it alone.

    Another server (bench/compare.py's uWSGI and gunicorn) is raced with its
    own `url` and the `server` facts of the lab mode whose capacity model
    describes it (e.g. uWSGI's `--processes 2` is "blocking" in 2 processes):
    it has no /stats to read them from.
    """
    emit = _serialised(on_event)
    base = base.rstrip("/")
    given = server
    server = given or server_facts(base, timeout)
    url = url or mode_url(base, mode, workload, params)
    if warmup_s > 0:
        warm_up(url, int(server["cpu_count"]), warmup_s, timeout)
    # The median of a few: one solo run is often slowed by something else.
    samples, _ = solo_samples(url, max(1, solo_runs), timeout)
    solo_s = median(samples)
    # Once more, as the race will find it: the first request may have started
    # what the mode runs on (the embedded Dask cluster starts on first use).
    server = given or server_facts(base, timeout)
    name = ran(mode, workload)
    able = lanes(mode, name, server)
    # Only where runs could go at once does the machine's parallel capacity matter.
    capacity = None
    if measure_capacity and able is not None and able > 1 and not server["waits"].get(name, False):
        capacity = machine.measure(int(server["cpu_count"]))
    emit(
        {
            "event": "race",
            "url": url,
            "mode": mode,
            "workload": ran(mode, workload),  # as its envelopes say
            "params": params,
            "concurrency": concurrency,
            "solo_s": solo_s,
            "server": server,
            "solo_samples_s": samples,
            "solo_runs": len(samples),
            "reps": reps,
            "capacity": None if capacity is None else {**asdict(capacity), "effective_cores": capacity.effective_cores},
        }
    )

    responses, pings = _fire(
        base, url, concurrency, reps, ping_every=ping_every, ping_batch=ping_batch, timeout=timeout, emit=emit
    )
    if solo_after:
        after, _ = solo_samples(url, max(1, solo_runs), timeout)
        samples = samples + after
        solo_s = median(samples)
    summary = summarise(
        mode=mode,
        workload=workload,
        concurrency=concurrency,
        solo_s=solo_s,
        server=server,
        responses=responses,
        pings=pings,
        url=url,
        params=params,
        solo_samples_s=samples,
        reps=reps,
        capacity=capacity,
    )
    emit({"event": "done", "summary": asdict(summary)})
    return summary, sorted(responses, key=lambda r: r.index), pings


def _serialised(on_event: Callable[[Event], None] | None) -> Callable[[Event], None]:
    if on_event is None:
        return lambda event: None
    lock = threading.Lock()

    def emit(event: Event) -> None:
        with lock:
            on_event(event)

    return emit


def ping_batch_event(batch: Sequence[Ping]) -> Event:
    """Several probes as one event: how many, how long they waited (median, worst), the GIL lately."""
    answered = [p for p in batch if p.status == 200]
    worst = max(answered, key=lambda p: p.ms, default=None)
    gils = [p.gil for p in answered if p.gil is not None]
    return {
        "event": "pings",
        "count": len(batch),
        "failed": len(batch) - len(answered),
        "from": batch[0].sent,
        "to": batch[-1].received,
        "p50_ms": percentile([p.ms for p in answered], 0.5),
        "max_ms": worst.ms if worst else None,
        "worst": {"sent": worst.sent, "received": worst.received, "ms": worst.ms} if worst else None,
        "gil": max(gils) if gils else None,
    }


def _fire(
    base: str,
    url: str,
    concurrency: int,
    reps: int,
    *,
    ping_every: float,
    ping_batch: float,
    timeout: float,
    emit: Callable[[Event], None],
) -> tuple[list[Response], list[Ping]]:
    """Release `concurrency` clients together while probing /ping; every response and ping."""
    pings: list[Ping] = []
    stop_probe = threading.Event()

    def probe() -> None:
        batch: list[Ping] = []
        while not stop_probe.is_set():
            code, body, p_sent, p_received = get(f"{base}/ping", timeout)
            gil = body.get("gil") if isinstance(body, dict) else None
            ping = Ping(p_sent, p_received, round((p_received - p_sent) * 1000, 3), code, gil)
            pings.append(ping)
            if ping_batch <= 0:
                emit({"event": "ping", **asdict(ping)})
            else:
                batch.append(ping)
                if ping.received - batch[0].sent >= ping_batch:
                    emit(ping_batch_event(batch))
                    batch = []
            stop_probe.wait(ping_every)
        if batch:
            emit(ping_batch_event(batch))

    barrier = threading.Barrier(concurrency)
    responses: list[Response] = []
    lock = threading.Lock()

    failures: list[BaseException] = []

    def client(number: int) -> None:
        try:
            barrier.wait()
            for rep in range(reps):
                index = number * reps + rep
                code, reply, r_sent, r_received = get(with_tag(url, str(index)), timeout)
                response = Response(index, r_sent, r_received, code, reply)
                with lock:
                    responses.append(response)
                emit({"event": "response", **asdict(response)})
        except BaseException as error:  # handed to the main thread, raised there
            failures.append(error)
            barrier.abort()

    # Daemon threads, joined one by one: an interrupted race (Ctrl-C) ends at
    # once instead of waiting for answers nobody wants any more.
    prober = threading.Thread(target=probe, name="ping-probe", daemon=True)
    clients = [threading.Thread(target=client, args=(n,), name=f"race-{n}", daemon=True) for n in range(concurrency)]
    prober.start()
    for thread in clients:
        thread.start()
    for thread in clients:
        thread.join()
    stop_probe.set()
    if failures:
        raise failures[0]
    prober.join(timeout)
    return responses, pings


def summarise(
    *,
    mode: str,
    workload: str,
    concurrency: int,
    solo_s: float,
    server: dict[str, Any],
    responses: list[Response],
    pings: list[Ping],
    url: str = "",
    params: dict[str, str] | None = None,
    solo_samples_s: list[float] | None = None,
    reps: int = 1,
    capacity: machine.Capacity | None = None,
) -> Summary:
    ok = [r for r in responses if r.status == 200]
    seconds = [r.seconds for r in responses]
    start = min(r.sent for r in responses)
    end = max(r.received for r in responses)
    name = ran(mode, workload)
    ideal = ideal_makespan(mode, name, server, solo_s, concurrency, reps=reps)
    able = lanes(mode, name, server)
    if capacity is not None:
        reachable: float | None = reachable_makespan(
            mode, name, server, solo_s, concurrency, at_once=capacity.at_once, reps=reps
        )
    elif able is None or able < 2 or server.get("waits", {}).get(name, False):
        reachable = ideal  # no runs compete for cores: what the machine gives parallel work does not matter
    else:
        reachable = None  # not measured (--no-capacity)
    ping_ms = [p.ms for p in pings if p.status == 200]
    gils = [p.gil for p in pings if p.status == 200 and p.gil is not None]
    timings = [r.body["timing"] for r in ok if isinstance(r.body, dict) and "timing" in r.body]
    cpu = [(t["cpu_ms"], t["run_ms"]) for t in timings if t.get("cpu_ms") is not None]
    samples = solo_samples_s or []
    return Summary(
        mode=mode,
        workload=name,
        concurrency=concurrency,
        solo_s=round(solo_s, 4),
        elapsed_s=round(end - start, 4),
        mean_s=round(sum(seconds) / len(seconds), 4),
        shortest_s=round(min(seconds), 4),
        longest_s=round(max(seconds), 4),
        transactions=len(ok),
        failed=len(responses) - len(ok),
        ideal_s=round(ideal, 4),
        ratio=round((end - start) / ideal, 3) if ideal > 0 else float("nan"),
        cores=int(server["cpu_count"]),
        processes=int(server.get("processes", 1)),
        lanes=able,
        ideal_words=ideal_words(mode, name, server, solo_s, concurrency, reps=reps),
        worker_pids=sorted({r.body["worker"]["pid"] for r in ok if isinstance(r.body, dict)}),
        server_pids=sorted({r.body["server"]["pid"] for r in ok if isinstance(r.body, dict)}),
        spread=spread_of([r.body["server"]["pid"] for r in ok if isinstance(r.body, dict)]),
        ping_count=len(pings),
        ping_p50_ms=percentile(ping_ms, 0.5),
        ping_p99_ms=percentile(ping_ms, 0.99),
        ping_max_ms=max(ping_ms) if ping_ms else None,
        url=url,
        params=dict(params or {}),
        solo_samples_s=[round(s, 4) for s in solo_samples_s or []],
        started_at=start,
        p95_s=round(percentile(seconds, 0.95) or 0.0, 4),
        throughput_rps=round(len(ok) / (end - start), 3) if end > start else 0.0,
        reps=reps,
        solo_spread=round((max(samples) - min(samples)) / median(samples), 3) if samples else 0.0,
        slowdown=None if capacity is None else capacity.slowdown,
        reachable_ideal_s=None if reachable is None else round(reachable, 4),
        reachable_ratio=round((end - start) / reachable, 3) if reachable else None,
        cpu_share=round(sum(c for c, _ in cpu) / sum(r for _, r in cpu), 3) if cpu and sum(r for _, r in cpu) else None,
        gil_p50=percentile(gils, 0.5),
        gil_max=max(gils) if gils else None,
    )
