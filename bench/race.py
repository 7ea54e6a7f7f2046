"""Fire N concurrent requests at one mode of a lab server and record what happened.

    python -m bench.race --url http://127.0.0.1:8000 --mode processing --workload count -c 10
    python bench/race.py --all -c 10          # every mode, on a server it starts itself

Every request goes out at the same instant (a barrier releases N threads,
each on its own connection, as siege does); with -r R each of them then sends
R - 1 more, one after another (siege -c N -r R). Meanwhile a probe thread sends
GET /ping every few milliseconds and records how long each took: the server's
responsiveness while the race runs. Solo requests before the race measure the
single-run time `t` (their median) that the ideal makespan is computed from.

Prints a table (elapsed, mean/shortest/longest, ideal, ratio, ping p50/p99/max)
and writes race.json plus a PNG timeline per mode under bench/results/.

With --jsonl the race is streamed as JSON lines on stdout (the lab page's
race driver reads them); see EVENTS below. Nothing else goes to stdout then,
and no files are written unless --out is given.
"""

from __future__ import annotations

import argparse
import http.client
import json
import math
import shlex
import signal
import sys
import tempfile
import threading
import time
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from types import FrameType
from typing import Any, TextIO

if __package__ in (None, ""):  # run as `python bench/race.py`: make the `bench` package importable
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench import charts
from bench.servers import LocalServer
from bench.summary import COLUMNS, PING_COLUMNS, median, new_results_dir, text_table
from lab import loopback

MODES = ("blocking", "threading", "processing", "async")

EVENTS = """
{"event": "race", "url", "mode", "workload", "params", "concurrency", "solo_s", "server": {...},
                  "solo_samples_s": [...], "solo_runs", "reps"}
{"event": "response", "index", "sent", "received", "status", "body"}   one per request, as it completes
{"event": "ping", "sent", "received", "ms", "status"}                   one per probe
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


# Workloads that wait instead of computing: they need a free thread, not a core.
WAITING_WORKLOADS = frozenset({"sleep"})


def lanes(mode: str, workload: str, server: dict[str, Any]) -> int:
    """How many runs can make progress at once (SPEC.md's ideal, generalised to forked servers).

    Per server process: blocking runs one at a time; threading runs one at a
    time if the workload holds the GIL, else one per thread; processing one
    per pool worker. Forked servers multiply that by the process count, and
    computing work is capped by the cores (waiting work is not).
    """
    processes = int(server.get("processes", 1))
    releases = bool(server.get("releases_gil", {}).get(workload, False))
    per_process = {
        "blocking": 1,
        "threading": int(server["thread_pool"]) if releases else 1,
        "processing": int(server["process_pool"]),
    }[mode]
    total = processes * per_process
    return total if workload in WAITING_WORKLOADS else min(total, int(server["cpu_count"]))


def ideal_makespan(
    mode: str, workload: str, server: dict[str, Any], solo_s: float, concurrency: int, *, reps: int = 1
) -> float:
    """The best possible elapsed time for `concurrency` simultaneous runs of `solo_s` each.

    With `reps` > 1 each of the `concurrency` clients sends its requests one
    after another (siege -r): the work is concurrency x reps runs, and no
    client can finish in fewer than `reps` rounds.
    """
    if mode == "async":
        return reps * solo_s  # every call waits at the upstream together
    rounds = max(reps, math.ceil(concurrency * reps / lanes(mode, workload, server)))
    return rounds * solo_s


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
    path = "/async" if mode == "async" else f"/{mode}/{workload}" if workload else f"/{mode}"
    query = urllib.parse.urlencode(params)
    return f"{base.rstrip('/')}{path}" + (f"?{query}" if query else "")


def with_tag(url: str, tag: str) -> str:
    """The same request with `_=tag` (ignored by the server) so every URL is distinct."""
    return f"{url}{'&' if '?' in url else '?'}_={tag}"


def server_facts(base: str, timeout: float) -> dict[str, Any]:
    status, body, _, _ = get(f"{base}/stats", timeout)
    if status != 200 or not isinstance(body, dict):
        raise RuntimeError(f"{base}/stats answered {status}: is this a lab server?")
    server: dict[str, Any] = body["server"]
    status, workloads, _, _ = get(f"{base}/workloads", timeout)
    server["releases_gil"] = {w["name"]: w["releases_gil"] for w in workloads} if status == 200 else {}
    return server


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
    timeout: float = 300.0,
    solo_runs: int = 3,
    reps: int = 1,
    warmup_s: float = 0.0,
    on_event: Callable[[Event], None] | None = None,
) -> tuple[Summary, list[Response], list[Ping]]:
    """Run one race; `on_event` sees every event as it happens (for streaming and progress).

    `concurrency` clients start together; each sends `reps` requests one
    after another (like siege -c C -r R), so there are concurrency x reps
    responses, indexed client x reps + rep.

    Events come from several threads; they are passed to `on_event` one at a
    time, so a consumer writing lines never interleaves two of them.
    """
    emit = _serialised(on_event)
    base = base.rstrip("/")
    server = server_facts(base, timeout)
    url = mode_url(base, mode, workload, params)
    if warmup_s > 0:
        warm_up(url, int(server["cpu_count"]), warmup_s, timeout)
    # The median of a few: one solo run is often slowed by something else.
    samples, _ = solo_samples(url, max(1, solo_runs), timeout)
    solo_s = median(samples)
    emit(
        {
            "event": "race",
            "url": url,
            "mode": mode,
            "workload": "upstream" if mode == "async" else workload,  # as its envelopes say
            "params": params,
            "concurrency": concurrency,
            "solo_s": solo_s,
            "server": server,
            "solo_samples_s": samples,
            "solo_runs": len(samples),
            "reps": reps,
        }
    )

    responses, pings = _fire(base, url, concurrency, reps, ping_every=ping_every, timeout=timeout, emit=emit)
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


def _fire(
    base: str,
    url: str,
    concurrency: int,
    reps: int,
    *,
    ping_every: float,
    timeout: float,
    emit: Callable[[Event], None],
) -> tuple[list[Response], list[Ping]]:
    """Release `concurrency` clients together while probing /ping; every response and ping."""
    pings: list[Ping] = []
    stop_probe = threading.Event()

    def probe() -> None:
        while not stop_probe.is_set():
            code, _, p_sent, p_received = get(f"{base}/ping", timeout)
            ping = Ping(p_sent, p_received, round((p_received - p_sent) * 1000, 3), code)
            pings.append(ping)
            emit({"event": "ping", **asdict(ping)})
            stop_probe.wait(ping_every)

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
) -> Summary:
    ok = [r for r in responses if r.status == 200]
    seconds = [r.seconds for r in responses]
    start = min(r.sent for r in responses)
    end = max(r.received for r in responses)
    ideal = ideal_makespan(mode, workload, server, solo_s, concurrency, reps=reps)
    ping_ms = [p.ms for p in pings if p.status == 200]
    return Summary(
        mode=mode,
        workload="upstream" if mode == "async" else workload,
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
        lanes=None if mode == "async" else lanes(mode, workload, server),
        worker_pids=sorted({r.body["worker"]["pid"] for r in ok if isinstance(r.body, dict)}),
        server_pids=sorted({r.body["server"]["pid"] for r in ok if isinstance(r.body, dict)}),
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
    )


class Progress:
    """A tick on stderr per finished request ('.' ok, 'x' failed), one line per race."""

    def __init__(self, stream: TextIO = sys.stderr) -> None:
        self.stream = stream
        self.done = 0

    def __call__(self, event: Event) -> None:
        kind = event["event"]
        if kind == "race":
            self.done = 0
            total = event["concurrency"] * event.get("reps", 1)
            self._write(f"{event['mode']:<10} solo {event['solo_s']:.2f} s, {total} requests ")
        elif kind == "response":
            self.done += 1
            self._write("." if event["status"] == 200 else "x")
        elif kind == "done":
            s = event["summary"]
            total = s["concurrency"] * s.get("reps", 1)
            self._write(f" {self.done}/{total} in {s['elapsed_s']:.2f} s (ratio {s['ratio']:.2f})\n")

    def _write(self, text: str) -> None:
        self.stream.write(text)
        self.stream.flush()


def param_pair(text: str) -> tuple[str, str]:
    """argparse type for NAME=VALUE (the bench tools' -p)."""
    name, sep, value = text.partition("=")
    if not sep or not name:
        raise argparse.ArgumentTypeError(f"expected NAME=VALUE, got {text!r}")
    return name, value


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="python -m bench.race", description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--url", help="base URL of a running lab server (default: start one for this run)")
    parser.add_argument("--mode", choices=MODES, default="processing")
    parser.add_argument("--all", action="store_true", help="race every mode, one after another")
    parser.add_argument("--workload", default="count", help="workload name (ignored for --mode async)")
    parser.add_argument(
        "--param",
        "-p",
        action="append",
        type=param_pair,
        default=[],
        metavar="NAME=VALUE",
        help="workload (or, with --mode async, async) param, repeatable: -p n=5000000",
    )
    parser.add_argument("--delay", type=float, metavar="S", help="/async upstream delay (default: the server's, 1 s)")
    parser.add_argument("-c", "--concurrency", type=int, default=10, help="simultaneous requests (default: 10)")
    parser.add_argument("-r", "--reps", type=int, default=1, help="requests per client, one after another (default: 1)")
    parser.add_argument("--ping-every", type=float, default=0.005, metavar="S", help="probe interval (default: 0.005)")
    parser.add_argument(
        "--solo-runs",
        type=int,
        default=3,
        metavar="N",
        help="solo requests whose median is the single-run time t (default: 3)",
    )
    parser.add_argument(
        "--warmup",
        type=float,
        default=0.0,
        metavar="S",
        help="before the solo runs, load the endpoint with one request per core for S seconds (default: 0)",
    )
    parser.add_argument("--jsonl", action="store_true", help="stream events as JSON lines on stdout")
    parser.add_argument(
        "--out",
        type=Path,
        metavar="DIR",
        help="folder for race.json and timeline PNGs (default: bench/results/race-<stamp>/)",
    )
    parser.add_argument("--no-files", action="store_true", help="print the table only")
    parser.add_argument("--quiet", action="store_true", help="no progress ticks on stderr")
    parser.add_argument(
        "--server-args",
        default="",
        metavar="ARGS",
        help="flags for the server started when --url is not given, e.g. '--processes 0'",
    )
    return parser


def race_params(args: argparse.Namespace, mode: str) -> dict[str, str]:
    """-p params go to the workload; /async takes --delay (or -p when it is the only mode)."""
    if mode != "async":
        return dict(args.param)
    params = dict(args.param) if not args.all else {}
    if args.delay is not None:
        params["delay"] = repr(args.delay)
    return params


def run_races(args: argparse.Namespace, base: str, on_event: Callable[[Event], None] | None) -> list[dict[str, Any]]:
    """Every requested race, in order; each as {"summary", "responses", "pings"}."""
    results = []
    for mode in MODES if args.all else (args.mode,):
        summary, responses, pings = race(
            base,
            mode,
            args.workload,
            race_params(args, mode),
            args.concurrency,
            ping_every=args.ping_every,
            solo_runs=args.solo_runs,
            reps=args.reps,
            warmup_s=args.warmup,
            on_event=on_event,
        )
        results.append({"summary": summary, "responses": responses, "pings": pings})
    return results


def write_files(out: Path, base: str, results: list[dict[str, Any]]) -> list[Path]:
    """race.json (everything measured) and one timeline PNG per race; the paths written."""
    out.mkdir(parents=True, exist_ok=True)
    doc: list[dict[str, Any]] = [
        {
            "summary": asdict(r["summary"]),
            "responses": [asdict(x) for x in r["responses"]],
            "pings": [asdict(p) for p in r["pings"]],
        }
        for r in results
    ]
    data = out / "race.json"
    data.write_text(json.dumps({"url": base, "races": doc}, indent=1) + "\n")
    written = [data]
    for race_doc in doc:
        written.append(charts.timeline(out / f"timeline-{race_doc['summary']['mode']}.png", **race_doc))
    return written


def stop_on_sigterm() -> None:
    """SIGTERM unwinds like Ctrl-C, so a server this run started is stopped on the way out."""

    def leave(signum: int, frame: FrameType | None) -> None:
        raise KeyboardInterrupt

    signal.signal(signal.SIGTERM, leave)


def parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    parser = build_parser()
    args = parser.parse_args(argv)
    for name, value, low, high in (("-c", args.concurrency, 1, 200), ("-r", args.reps, 1, 100),
                                   ("--solo-runs", args.solo_runs, 1, 20)):  # fmt: skip
        if not low <= value <= high:
            parser.error(f"{name} must be between {low} and {high}")
    return args


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_args(argv)
    stop_on_sigterm()

    def stream(event: Event) -> None:
        sys.stdout.write(json.dumps(event) + "\n")
        sys.stdout.flush()

    on_event = stream if args.jsonl else None if args.quiet else Progress()
    try:
        if args.url:
            results = run_races(args, args.url.rstrip("/"), on_event)
            base = args.url
        else:
            results, base = _with_own_server(args, on_event)
    except (RuntimeError, OSError) as error:
        if args.jsonl:
            stream({"event": "error", "message": str(error)})
        print(f"error: {error}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        print("\ninterrupted", file=sys.stderr)
        return 130
    if not args.jsonl or args.out is not None:
        report(args, base, results)
    return 0


def report(args: argparse.Namespace, base: str, results: list[dict[str, Any]]) -> None:
    """The table, and the files with their paths (on stderr with --jsonl: stdout carries JSON lines only)."""
    out = sys.stderr if args.jsonl else sys.stdout
    summaries = [{"endpoint": r["summary"].mode, **asdict(r["summary"])} for r in results]
    print(text_table(summaries, COLUMNS + PING_COLUMNS), file=out)
    if not args.no_files:
        for path in write_files(args.out or new_results_dir("race-"), base, results):
            print(f"wrote {path}", file=out)


def _with_own_server(
    args: argparse.Namespace, on_event: Callable[[Event], None] | None
) -> tuple[list[dict[str, Any]], str]:
    """Start a server for this run (stopped however the run ends); the races and its URL."""
    with tempfile.TemporaryDirectory(prefix="race-server-") as tmp:
        if not args.jsonl:
            print(f"starting a server: server.py {args.server_args}".rstrip(), file=sys.stderr)
        with LocalServer(shlex.split(args.server_args), Path(tmp) / "server.log") as server:
            return run_races(args, server.url, on_event), server.url


if __name__ == "__main__":
    sys.exit(main())
