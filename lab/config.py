"""Server configuration: a frozen dataclass filled from the command line."""

from __future__ import annotations

import argparse
import os
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from urllib.parse import urlsplit

from lab import ROOT
from lab.accept import POLICIES
from lab.upstream_client import CLIENTS


def cpu_count() -> int:
    """CPUs this process may run on (affinity-aware, unlike os.cpu_count)."""
    if hasattr(os, "sched_getaffinity"):
        return len(os.sched_getaffinity(0))
    return os.cpu_count() or 1


def default_thread_pool() -> int:
    # The size Python's own default executor picks (concurrent.futures docs).
    return min(32, cpu_count() + 4)


DEFAULT_MAX_PENDING = 100
DEFAULT_JOB_TIMEOUT = 60.0
DEFAULT_UPSTREAM_TIMEOUT = 15.0
DEFAULT_GRACE = 10.0
# Where the bench writes its runs; GET /compare shows the newest comparison found there.
DEFAULT_RESULTS = ROOT / "bench" / "results"


@dataclass(frozen=True)
class Config:
    host: str = "127.0.0.1"
    port: int = 8000
    processes: int = 1
    thread_pool: int = field(default_factory=default_thread_pool)
    process_pool: int = field(default_factory=cpu_count)
    upstream: str | None = None
    access_log: bool = True
    debug: bool = False
    max_pending: int = DEFAULT_MAX_PENDING
    job_timeout: float = DEFAULT_JOB_TIMEOUT
    upstream_timeout: float = DEFAULT_UPSTREAM_TIMEOUT
    grace: float = DEFAULT_GRACE
    accept: str = "fair"
    upstream_client: str = "pooled"
    dask_scheduler: str | None = None
    dask_workers: int | None = None  # None: one per core, shared out among forked children
    results: Path = DEFAULT_RESULTS

    @property
    def forked(self) -> bool:
        return self.processes != 1

    @property
    def process_count(self) -> int:
        """How many server processes serve requests (0 means one per core)."""
        return self.processes or cpu_count()


def _count(minimum: int) -> Callable[[str], int]:
    def parse(text: str) -> int:
        try:
            value = int(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"{text!r} is not an integer") from None
        if value < minimum:
            raise argparse.ArgumentTypeError(f"must be at least {minimum}, got {value}")
        return value

    return parse


def _seconds(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a number of seconds") from None
    if not 0 < value < float("inf"):
        raise argparse.ArgumentTypeError(f"must be a positive number of seconds, got {text}")
    return value


def _url(text: str) -> str:
    parts = urlsplit(text)
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise argparse.ArgumentTypeError(f"{text!r} is not an http(s)://host[:port] URL")
    return text.rstrip("/")


def _scheduler(text: str) -> str:
    parts = urlsplit(text)
    if parts.scheme != "tcp" or not parts.hostname or parts.port is None:
        raise argparse.ArgumentTypeError(f"{text!r} is not a Dask scheduler address like tcp://127.0.0.1:8786")
    return text.rstrip("/")


def build_parser() -> argparse.ArgumentParser:
    cores = cpu_count()
    parser = argparse.ArgumentParser(
        prog="server.py",
        description=(
            "Tornado Concurrency Lab: serve the same workloads on the event loop "
            "(/blocking), a thread pool (/threading), a process pool (/processing), "
            "as async I/O (/async) and from forked processes (--processes)."
        ),
        epilog=(
            "examples:\n"
            "  python server.py                       # http://127.0.0.1:8000, embedded upstream\n"
            "  python server.py --processes 0         # one forked server per core\n"
            "  python server.py --port 0              # any free port (printed at start-up)\n"
            "  curl 'http://127.0.0.1:8000/processing/fib?n=30'"
        ),
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--host", default="127.0.0.1", help="bind address (default: %(default)s, loopback only)")
    parser.add_argument("--port", type=_count(0), default=8000, help="port; 0 picks a free one (default: %(default)s)")
    parser.add_argument(
        "--processes",
        type=_count(0),
        default=1,
        metavar="N",
        help=f"forked server processes; 0 = one per CPU core, here {cores} (default: %(default)s)",
    )
    parser.add_argument(
        "--thread-pool",
        type=_count(1),
        default=default_thread_pool(),
        metavar="N",
        help="threads behind /threading, per server process (default: min(32, cores+4) = %(default)s)",
    )
    parser.add_argument(
        "--process-pool",
        type=_count(1),
        default=cores,
        metavar="N",
        help="worker processes behind /processing, per server process (default: cores = %(default)s)",
    )
    parser.add_argument(
        "--upstream",
        type=_url,
        metavar="URL",
        help="base URL /async calls (GET URL/delay?seconds=X); default: start the embedded upstream",
    )
    parser.add_argument(
        "--accept",
        choices=POLICIES,
        default="fair",
        help="how forked children share connections: fair = one at a time, only while a child has room "
        "(even spread); all = Tornado's own, a child that wakes takes every waiting connection; reuseport = "
        "a socket per child, the kernel hashes connections to them (default: %(default)s; no effect unforked)",
    )
    parser.add_argument(
        "--dask-scheduler",
        type=_scheduler,
        metavar="tcp://HOST:PORT",
        help="/distributed runs on this running Dask cluster (docs/operating.md); default: an "
        "embedded LocalCluster, started on the first /distributed request",
    )
    parser.add_argument(
        "--dask-workers",
        type=_count(1),
        metavar="N",
        help=f"worker processes (one thread each) of the embedded cluster, per server process (default: one per "
        f"core, here {cores}, shared out among forked children)",
    )
    parser.add_argument(
        "--results",
        type=Path,
        default=DEFAULT_RESULTS,
        metavar="DIR",
        help="where the page's peers view (GET /compare) looks for the newest bench/compare.py run "
        "(default: bench/results)",
    )
    parser.add_argument("--no-access-log", action="store_true", help="do not log every request")
    parser.add_argument(
        "--debug",
        action="store_true",
        help="tracebacks in error bodies and autoreload (needs --processes 1)",
    )
    parser.add_argument(
        "--max-pending",
        type=_count(0),
        default=DEFAULT_MAX_PENDING,
        metavar="N",
        help="jobs that may wait for a busy pool before new ones get 503 (default: %(default)s)",
    )
    parser.add_argument(
        "--job-timeout",
        type=_seconds,
        default=DEFAULT_JOB_TIMEOUT,
        metavar="S",
        help="pool jobs running longer (from when a worker starts them) get 504; a stuck worker "
        "process is replaced (default: %(default)s)",
    )
    parser.add_argument(
        "--upstream-client",
        choices=CLIENTS,
        default="pooled",
        help="/async's HTTP client: pooled = keep-alive connections reused across calls; simple = Tornado's "
        "SimpleAsyncHTTPClient, a new connection per call, to compare with (default: %(default)s)",
    )
    parser.add_argument(
        "--upstream-timeout",
        type=_seconds,
        default=DEFAULT_UPSTREAM_TIMEOUT,
        metavar="S",
        help="/async: a refused upstream is 502, one silent S seconds past the delay asked for is 504 "
        "(default: %(default)s)",
    )
    parser.add_argument(
        "--grace",
        type=_seconds,
        default=DEFAULT_GRACE,
        metavar="S",
        help="on SIGTERM/Ctrl-C, how long in-flight requests may take to finish (default: %(default)s)",
    )
    return parser


def parse_args(argv: Sequence[str] | None = None) -> Config:
    parser = build_parser()
    args = parser.parse_args(argv)
    if args.debug and args.processes != 1:
        parser.error("--debug needs --processes 1: autoreload cannot restart forked children")
    if args.dask_workers and args.dask_scheduler:
        parser.error("--dask-workers sizes the embedded cluster; a --dask-scheduler cluster has its own workers")
    if args.upstream_client == "pooled" and args.upstream and args.upstream.startswith("https:"):
        parser.error("the pooled upstream client speaks plain HTTP: add --upstream-client simple for an https upstream")
    return Config(
        host=args.host,
        port=args.port,
        processes=args.processes,
        thread_pool=args.thread_pool,
        process_pool=args.process_pool,
        upstream=args.upstream,
        access_log=not args.no_access_log,
        debug=args.debug,
        max_pending=args.max_pending,
        job_timeout=args.job_timeout,
        upstream_timeout=args.upstream_timeout,
        grace=args.grace,
        accept=args.accept,
        upstream_client=args.upstream_client,
        dask_scheduler=args.dask_scheduler,
        dask_workers=args.dask_workers,
        results=args.results,
    )
