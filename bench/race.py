"""Fire N concurrent requests at one mode of a lab server and record what happened.

    python -m bench.race --url http://127.0.0.1:8000 --mode processing --workload count -c 10

Every request goes out at the same instant (a barrier releases N threads,
each on its own connection, as siege does). Meanwhile a probe thread sends
GET /ping every few milliseconds and records how long each took: the server's
responsiveness while the race runs. One solo request before the race measures
the single-run time `t` that the ideal makespan is computed from.

With --jsonl the race is streamed as JSON lines on stdout (the lab page's
race driver reads them); see EVENTS below.
"""

from __future__ import annotations

import argparse
import json
import math
import sys
import threading
import time
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import asdict, dataclass, field
from typing import Any

MODES = ("blocking", "threading", "processing", "async")

EVENTS = """
{"event": "race", "url", "mode", "workload", "params", "concurrency", "solo_s", "server": {...}}
{"event": "response", "index", "sent", "received", "status", "body"}   one per request, as it completes
{"event": "ping", "sent", "received", "ms", "status"}                   one per probe
{"event": "done", "summary": {...}}                                      see Summary
"""


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


def ideal_makespan(mode: str, workload: str, server: dict[str, Any], solo_s: float, concurrency: int) -> float:
    """The best possible elapsed time for `concurrency` simultaneous runs of `solo_s` each."""
    if mode == "async":
        return solo_s  # every call waits at the upstream together
    return math.ceil(concurrency / lanes(mode, workload, server)) * solo_s


def get(url: str, timeout: float) -> tuple[int, Any, float, float]:
    """(status, parsed JSON body or text, sent, received) for one GET on a fresh connection."""
    sent = time.time()
    try:
        with urllib.request.urlopen(url, timeout=timeout) as reply:
            status, raw = reply.status, reply.read()
    except urllib.error.HTTPError as error:
        status, raw = error.code, error.read()
    except OSError as error:
        return 0, {"error": {"status": 0, "message": str(error)}}, sent, time.time()
    received = time.time()
    try:
        return status, json.loads(raw), sent, received
    except ValueError:
        return status, raw.decode(errors="replace"), sent, received


def percentile(values: Sequence[float], q: float) -> float | None:
    if not values:
        return None
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, math.ceil(q * len(ordered)) - 1)]


def mode_url(base: str, mode: str, workload: str, params: dict[str, str]) -> str:
    path = "/async" if mode == "async" else f"/{mode}/{workload}"
    query = urllib.parse.urlencode(params)
    return f"{base}{path}" + (f"?{query}" if query else "")


def server_facts(base: str, timeout: float) -> dict[str, Any]:
    status, body, _, _ = get(f"{base}/stats", timeout)
    if status != 200 or not isinstance(body, dict):
        raise RuntimeError(f"{base}/stats answered {status}: is this a lab server?")
    server: dict[str, Any] = body["server"]
    status, workloads, _, _ = get(f"{base}/workloads", timeout)
    server["releases_gil"] = {w["name"]: w["releases_gil"] for w in workloads} if status == 200 else {}
    return server


def race(
    base: str,
    mode: str,
    workload: str,
    params: dict[str, str],
    concurrency: int,
    *,
    ping_every: float = 0.005,
    timeout: float = 300.0,
    on_event: Callable[[dict[str, Any]], None] | None = None,
) -> tuple[Summary, list[Response], list[Ping]]:
    """Run one race; `on_event` sees every event as it happens (for streaming and progress)."""
    emit = on_event or (lambda event: None)
    base = base.rstrip("/")
    server = server_facts(base, timeout)
    url = mode_url(base, mode, workload, params)
    status, body, sent, received = get(url + ("&" if "?" in url else "?") + "_=solo", timeout)
    if status != 200:
        raise RuntimeError(f"solo request to {url} failed with {status}: {body}")
    solo_s = received - sent
    emit({"event": "race", "url": url, "mode": mode, "workload": workload, "params": params,
          "concurrency": concurrency, "solo_s": solo_s, "server": server})  # fmt: skip

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

    def one(index: int) -> None:
        barrier.wait()
        code, reply, r_sent, r_received = get(f"{url}{'&' if '?' in url else '?'}_={index}", timeout)
        response = Response(index, r_sent, r_received, code, reply)
        with lock:
            responses.append(response)
            emit({"event": "response", **asdict(response)})

    prober = threading.Thread(target=probe, name="ping-probe", daemon=True)
    prober.start()
    with ThreadPoolExecutor(concurrency, thread_name_prefix="race") as pool:
        list(pool.map(one, range(concurrency)))
    stop_probe.set()
    prober.join(timeout)

    summary = summarise(
        mode=mode,
        workload=workload,
        concurrency=concurrency,
        solo_s=solo_s,
        server=server,
        responses=responses,
        pings=pings,
    )
    emit({"event": "done", "summary": asdict(summary)})
    return summary, sorted(responses, key=lambda r: r.index), pings


def summarise(
    *,
    mode: str,
    workload: str,
    concurrency: int,
    solo_s: float,
    server: dict[str, Any],
    responses: list[Response],
    pings: list[Ping],
) -> Summary:
    ok = [r for r in responses if r.status == 200]
    seconds = [r.seconds for r in responses]
    start = min(r.sent for r in responses)
    end = max(r.received for r in responses)
    ideal = ideal_makespan(mode, workload, server, solo_s, concurrency)
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
    )


def _param(text: str) -> tuple[str, str]:
    name, sep, value = text.partition("=")
    if not sep or not name:
        raise argparse.ArgumentTypeError(f"expected NAME=VALUE, got {text!r}")
    return name, value


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="python -m bench.race", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)  # fmt: skip
    parser.add_argument("--url", required=True, help="base URL of a running lab server")
    parser.add_argument("--mode", choices=MODES, default="processing")
    parser.add_argument("--workload", default="count", help="workload name (ignored for --mode async)")
    parser.add_argument("--param", "-p", action="append", type=_param, default=[], metavar="NAME=VALUE",
                        help="workload (or async) param, repeatable: -p n=5000000")  # fmt: skip
    parser.add_argument("-c", "--concurrency", type=int, default=10, help="simultaneous requests (default: 10)")
    parser.add_argument("--ping-every", type=float, default=0.005, metavar="S", help="probe interval (default: 0.005)")
    parser.add_argument("--jsonl", action="store_true", help="stream events as JSON lines on stdout")
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    if not 1 <= args.concurrency <= 200:
        print("error: -c must be between 1 and 200", file=sys.stderr)
        return 2

    def stream(event: dict[str, Any]) -> None:
        print(json.dumps(event), flush=True)

    try:
        summary, _, _ = race(args.url, args.mode, args.workload, dict(args.param), args.concurrency,
                             ping_every=args.ping_every, on_event=stream if args.jsonl else None)  # fmt: skip
    except (RuntimeError, OSError) as error:
        if args.jsonl:
            stream({"event": "error", "message": str(error)})
        print(f"error: {error}", file=sys.stderr)
        return 1
    if not args.jsonl:
        print(json.dumps(asdict(summary), indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
