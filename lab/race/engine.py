"""The race engine: N requests released together at one mode of a lab server, /ping probed meanwhile.

Every request goes out at the same instant (a barrier releases N threads,
each on its own connection, as siege does); with reps R each of them then
sends R - 1 more, one after another (siege -c N -r R). Meanwhile a probe
thread sends GET /ping every few milliseconds and records how long each
took, and the server's GIL contention the answer reports: the server's
responsiveness while the race runs. Solo requests before the race measure
the single-run time `t` (their median, their spread is the noise) that the
ideal makespan is computed from (lab/race/ideal.py); where several runs could
go at once, this machine's parallel capacity is measured too
(lab/race/capacity.py), for the ideal it can really reach.

The lab page's race runs it as a program of its own (lab/race/__main__.py,
`python -m lab.race`, which prints EVENTS below one per line); bench/race.py
is its command line for people, and bench/sweep.py, bench/siege_steps.py and
bench/compare.py use it too. EVENTS are what `on_event` sees.
"""

from __future__ import annotations

import http.client
import json
import sys
import threading
import time
import urllib.error
import urllib.parse
from collections.abc import Callable
from dataclasses import asdict, dataclass, field, replace
from typing import Any

from lab import loopback
from lab.modes.contract import make_facts
from lab.modes.registry import MODES
from lab.race import capacity as machine
from lab.race.data import Event, Ping, RaceSpec, Response, Solo, Summary, ping_batch_event, summarise
from lab.race.ideal import lanes

EVENTS = """
{"event": "warmup", "sent", "received", "seconds", "status"}           one per warm-up request, as it ends
{"event": "solo", "run", "of", "sent", "received", "seconds"}          one per solo run t comes from, as it ends
{"event": "race", "url", "mode", "workload", "params", "concurrency", "solo_s", "server": {...},
                  "solo_samples_s": [...], "solo_runs", "reps", "capacity": {...} or null}
{"event": "response", "index", "sent", "received", "status", "body"}   one per request, as it completes
{"event": "ping", "sent", "received", "ms", "status", "gil", "core_wait"}  one per probe (ping_batch 0)
{"event": "pings", "count", "failed", "from", "to", "p50_ms", "max_ms",
                   "worst": {"sent", "received", "ms"}, "gil", "core_wait"}  or one per ping_batch seconds
{"event": "done", "summary": {...}}                                      see Summary in lab/race/data.py
{"event": "error", "message"}                                            the race could not run
"""


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


def mode_url(base: str, mode: str, workload: str | None, params: dict[str, str]) -> str:
    """The URL one request of this race goes to (workload None: the route's default)."""
    path = f"/{mode}/{workload}" if MODES[mode].runs(workload) else f"/{mode}"
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


def server_modes(base: str, workload: str | None, timeout: float) -> tuple[list[str], list[str]]:
    """The modes the server at `base` can run `workload` in (None: each mode's default), and why not the others.

    The server's own /modes and /workloads decide, not this process's
    registry: the server may run on another Python (interpreters needs 3.12+).
    """
    status, modes, _, _ = get(f"{base.rstrip('/')}/modes", timeout)
    if status != 200 or not isinstance(modes, list):
        raise RuntimeError(f"{base}/modes answered {status}: is this a lab server?")
    status, workloads, _, _ = get(f"{base.rstrip('/')}/workloads", timeout)
    listed = {w["name"]: w for w in workloads} if status == 200 and isinstance(workloads, list) else {}
    runnable, skipped = [], []
    for mode in modes:
        runs = listed.get(workload or "", {}).get("modes") if mode.get("runs_workloads", True) else None
        if not mode.get("available", True):
            skipped.append(f"{mode['name']}: {mode.get('unavailable_reason')}")
        elif runs is not None and mode["name"] not in runs:
            skipped.append(f"{mode['name']}: it cannot run {workload}")
        else:
            runnable.append(mode["name"])
    return runnable, skipped


def solo_samples(
    url: str, runs: int, timeout: float, emit: Callable[[Event], None] = lambda event: None
) -> tuple[list[float], Any]:
    """Client-side seconds of `runs` requests sent one at a time, and the last reply's body; `emit` sees a
    "solo" event as each ends (the page draws t while it is being timed)."""
    samples: list[float] = []
    body: Any = None
    for run in range(runs):
        status, body, sent, received = get(with_tag(url, f"solo{run}"), timeout)
        if status != 200:
            raise RuntimeError(f"solo request to {url} failed with {status}: {body}")
        samples.append(received - sent)
        emit({"event": "solo", "run": run + 1, "of": runs, "sent": sent, "received": received,
              "seconds": received - sent})  # fmt: skip
    return samples, body


def warm_up(
    url: str, concurrency: int, seconds: float, timeout: float, emit: Callable[[Event], None] = lambda event: None
) -> int:
    """Send rounds of `concurrency` simultaneous requests for at least `seconds`; how many were sent.

    At least one round. Several seconds of load matter on virtual machines
    whose CPUs speed up under sustained load: solo runs timed on a CPU that
    was idle a moment before would overstate `t`, and skew every ratio built on it.
    Each request's end is a "warmup" event: a page shows the server at work
    from the first answer on, not only once `t` is timed.
    """
    deadline = time.monotonic() + seconds
    sent = 0
    while True:
        tags = [with_tag(url, f"warmup{sent + i}") for i in range(concurrency)]
        threads = [threading.Thread(target=_warm_one, args=(tag, timeout, emit), daemon=True) for tag in tags]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
        sent += concurrency
        if time.monotonic() >= deadline:
            return sent


def _warm_one(url: str, timeout: float, emit: Callable[[Event], None]) -> None:
    status, body, sent, received = get(url, timeout)
    emit({"event": "warmup", "sent": sent, "received": received, "seconds": received - sent, "status": status})
    if status != 200:
        print(f"warning: warm-up request {url} answered {status}: {str(body)[:200]}", file=sys.stderr)


def race(spec: RaceSpec, on_event: Callable[[Event], None] | None = None) -> tuple[Summary, list[Response], list[Ping]]:
    """Run one race; `on_event` sees every event as it happens (for streaming and progress).

    There are concurrency x reps responses, indexed client x reps + rep.
    Events come from several threads; they are passed to `on_event` one at a
    time, so a consumer writing lines never interleaves two of them.
    """
    emit = _serialised(on_event)
    spec = replace(spec, base=spec.base.rstrip("/"))
    url = spec.url or mode_url(spec.base, spec.mode, spec.workload, spec.params)
    solo = time_solo_runs(spec, url, emit)
    capacity = parallel_capacity(spec, solo.server)
    emit(race_event(spec, url, solo, capacity))
    responses, pings = _fire(spec, url, emit)
    if spec.solo_after:
        solo = time_solo_runs_again(spec, url, solo)
    summary = summarise(spec, solo, capacity, responses, pings, url=url)
    emit({"event": "done", "summary": asdict(summary)})
    return summary, sorted(responses, key=lambda r: r.index), pings


def time_solo_runs(spec: RaceSpec, url: str, emit: Callable[[Event], None] = lambda event: None) -> Solo:
    """Warm the endpoint up (with `warmup_s`), time the solo runs t comes from (a "solo" event each), read the
    server's facts."""
    server = spec.server or server_facts(spec.base, spec.timeout)
    if spec.warmup_s > 0:
        # No more at once than can run at once: two /blocking runs sent together hold the event loop for
        # both, and the server relays nothing meanwhile (a page would wait for both to see either).
        able = lanes(spec.mode, spec.ran, server)
        cores = int(server["cpu_count"])
        warm_up(url, cores if able is None else max(1, min(cores, able)), spec.warmup_s, spec.timeout, emit)
    samples, _ = solo_samples(url, max(1, spec.solo_runs), spec.timeout, emit)
    # Once more, as the race will find it: the first request may have started
    # what the mode runs on (the embedded Dask cluster starts on first use).
    return Solo(samples, spec.server or server_facts(spec.base, spec.timeout))


def time_solo_runs_again(spec: RaceSpec, url: str, before: Solo) -> Solo:
    """As many solo runs after the race: t becomes the median of the runs on both sides of it."""
    after, _ = solo_samples(url, max(1, spec.solo_runs), spec.timeout)
    return Solo(before.samples + after, before.server)


def parallel_capacity(spec: RaceSpec, server: dict[str, Any]) -> machine.Capacity | None:
    """This machine's parallel capacity, measured where the race's runs could go at once (else None)."""
    able = lanes(spec.mode, spec.ran, server)
    if spec.measure_capacity and able is not None and able > 1 and not server["waits"].get(spec.ran, False):
        return machine.measure(int(server["cpu_count"]))
    return None


def race_event(spec: RaceSpec, url: str, solo: Solo, capacity: machine.Capacity | None) -> Event:
    """The "race" event: what is about to be raced, t, the server's facts, the machine's capacity."""
    return {
        "event": "race",
        "url": url,
        "mode": spec.mode,
        "workload": spec.ran,  # as its envelopes say
        "params": spec.params,
        "concurrency": spec.concurrency,
        "solo_s": solo.seconds,
        "server": solo.server,
        "solo_samples_s": solo.samples,
        "solo_runs": len(solo.samples),
        "reps": spec.reps,
        "capacity": None if capacity is None else {**asdict(capacity), "effective_cores": capacity.effective_cores},
    }


def _serialised(on_event: Callable[[Event], None] | None) -> Callable[[Event], None]:
    if on_event is None:
        return lambda event: None
    lock = threading.Lock()

    def emit(event: Event) -> None:
        with lock:
            on_event(event)

    return emit


def _fire(spec: RaceSpec, url: str, emit: Callable[[Event], None]) -> tuple[list[Response], list[Ping]]:
    """Release `concurrency` clients together while probing /ping; every response and ping."""
    burst = _Burst(spec, url, emit)
    probe = _Probe(spec, emit)
    # Daemon threads, joined one by one: an interrupted race (Ctrl-C) ends at
    # once instead of waiting for answers nobody wants any more.
    prober = threading.Thread(target=probe.run, name="ping-probe", daemon=True)
    clients = [
        threading.Thread(target=burst.client, args=(n,), name=f"race-{n}", daemon=True) for n in range(spec.concurrency)
    ]
    prober.start()
    for thread in clients:
        thread.start()
    for thread in clients:
        thread.join()
    probe.stop.set()
    if burst.failures:
        raise burst.failures[0]
    prober.join(spec.timeout)
    return burst.responses, probe.pings


@dataclass
class _Burst:
    """The race's clients: a barrier releases them together; each sends `reps` requests in a row."""

    spec: RaceSpec
    url: str
    emit: Callable[[Event], None]
    responses: list[Response] = field(default_factory=list)
    failures: list[BaseException] = field(default_factory=list)

    def __post_init__(self) -> None:
        self.barrier = threading.Barrier(self.spec.concurrency)
        self.lock = threading.Lock()

    def client(self, number: int) -> None:
        reps = self.spec.reps
        try:
            self.barrier.wait()
            for rep in range(reps):
                index = number * reps + rep
                code, reply, sent, received = get(with_tag(self.url, str(index)), self.spec.timeout)
                response = Response(index, sent, received, code, reply)
                with self.lock:
                    self.responses.append(response)
                self.emit({"event": "response", **asdict(response)})
        except BaseException as error:  # handed to the main thread, raised there
            self.failures.append(error)
            self.barrier.abort()


@dataclass
class _Probe:
    """GET /ping every `ping_every` seconds until `stop`: each probe kept, and emitted alone or in batches."""

    spec: RaceSpec
    emit: Callable[[Event], None]
    pings: list[Ping] = field(default_factory=list)
    stop: threading.Event = field(default_factory=threading.Event)

    def run(self) -> None:
        every, batching = self.spec.ping_every, self.spec.ping_batch
        batch: list[Ping] = []
        while not self.stop.is_set():
            code, body, sent, received = get(f"{self.spec.base}/ping", self.spec.timeout)
            meters = body if isinstance(body, dict) else {}
            ping = Ping(
                sent, received, round((received - sent) * 1000, 3), code, meters.get("gil"), meters.get("core_wait")
            )
            self.pings.append(ping)
            if batching <= 0:
                self.emit({"event": "ping", **asdict(ping)})
            else:
                batch.append(ping)
                if ping.received - batch[0].sent >= batching:
                    self.emit(ping_batch_event(batch))
                    batch = []
            self.stop.wait(every)
        if batch:
            self.emit(ping_batch_event(batch))
