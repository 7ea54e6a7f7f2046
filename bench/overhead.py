"""What each mode costs per request: the same tiny request, one at a time, in every mode, side by side.

    python -m bench.overhead                       # a server of its own; count?n=1, 50 per mode
    python -m bench.overhead --url http://127.0.0.1:8000 --modes processing,distributed -n 200

A run of `count?n=1` takes microseconds, so what a client waits for is the
mode itself: handing the job to a thread, pickling it to a worker process,
or a Dask scheduler's hop to a worker and back. Requests go one at a time,
round-robin over the modes (so a slow minute of a shared host hits every
mode alike), after a few unmeasured ones per mode (pools warm, the embedded
Dask cluster started). Per mode it reports the client's wait (p50, p90), the
part of it spent inside the server besides the run (the envelope's total_ms
minus run_ms: queueing and the hand-over both ways) and the run itself, and
writes overhead.json and overhead.md under bench/results/overhead-<stamp>/.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

if __package__ in (None, ""):  # run as `python bench/overhead.py`: make the `bench` package importable
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.lib.args import NO_FILES, OUT, PARAM, SERVER_ARGS, TIMEOUT, URL, WORKLOAD
from bench.lib.command import check_ranges, new_parser, run_command
from bench.lib.engine import get, mode_url, with_tag
from bench.lib.results import new_results_dir
from bench.lib.servers import lab_server
from bench.lib.stats import percentile
from bench.lib.tables import Column, markdown_table, text_table
from lab.modes.registry import MODES

WORKLOAD_MODES = [name for name, mode in MODES.items() if mode.runs_workloads]
WARMUP_REQUESTS = 5

COLUMNS = (
    Column("mode", "mode", "{}"),
    Column("requests", "requests", "{:d}"),
    Column("client_p50_ms", "client p50 ms", "{:.2f}"),
    Column("client_p90_ms", "client p90 ms", "{:.2f}"),
    Column("server_p50_ms", "in server p50 ms", "{:.2f}"),
    Column("run_p50_ms", "run p50 ms", "{:.3f}"),
    Column("failed", "failed", "{:d}"),
)


def build_parser() -> argparse.ArgumentParser:
    parser = new_parser("bench.overhead", __doc__)
    URL.add(parser)
    parser.add_argument(
        "--modes",
        default=",".join(WORKLOAD_MODES),
        help=f"comma-separated modes to measure (default: {','.join(WORKLOAD_MODES)})",
    )
    parser.add_argument("-n", "--requests", type=int, default=50, help="measured requests per mode (default: 50)")
    WORKLOAD.add(parser, help="workload name (default: count)")
    PARAM.add(parser, help="workload param, repeatable (default: n=1, a run of microseconds)")
    OUT.add(parser, help="folder for the results (default: a new one)")
    NO_FILES.add(parser)
    SERVER_ARGS.add(parser, help="flags for the server started when --url is not given")
    TIMEOUT.add(parser, help="per request (default: 60)")
    return parser


def parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    parser = build_parser()
    args = parser.parse_args(argv)
    args.modes = [m.strip() for m in args.modes.split(",") if m.strip()]
    unknown = [m for m in args.modes if m not in WORKLOAD_MODES]
    if unknown or not args.modes:
        parser.error(f"--modes takes modes that run workloads: {', '.join(WORKLOAD_MODES)} (got {args.modes})")
    check_ranges(parser, ("-n", args.requests, 1, 10_000))
    if not args.param and args.workload == "count":
        args.param = [("n", "1")]
    return args


def measure(
    base: str, modes: Sequence[str], *, workload: str, params: dict[str, str], requests: int, timeout: float
) -> dict[str, list[dict[str, Any]]]:
    """Every mode's samples: per request the client's seconds, the envelope's timing, the status."""
    urls = {mode: mode_url(base, mode, workload, params) for mode in modes}
    for url in urls.values():
        for i in range(WARMUP_REQUESTS):
            status, body, _, _ = get(with_tag(url, f"warm{i}"), timeout)
            if status != 200:
                raise RuntimeError(f"{url} answered {status}: {json.dumps(body)[:300]}")
    samples: dict[str, list[dict[str, Any]]] = {mode: [] for mode in modes}
    for i in range(requests):
        for mode, url in urls.items():
            status, body, sent, received = get(with_tag(url, str(i)), timeout)
            timing = body.get("timing", {}) if isinstance(body, dict) else {}
            samples[mode].append({"status": status, "client_ms": (received - sent) * 1000, **timing})
    return samples


def summarise(mode: str, samples: list[dict[str, Any]]) -> dict[str, Any]:
    ok = [s for s in samples if s["status"] == 200]
    client = [s["client_ms"] for s in ok]
    in_server = [s["total_ms"] - s["run_ms"] for s in ok]
    runs = [s["run_ms"] for s in ok]
    return {
        "mode": mode,
        "requests": len(samples),
        "failed": len(samples) - len(ok),
        "client_p50_ms": percentile(client, 0.5),
        "client_p90_ms": percentile(client, 0.9),
        # One estimator for every p50 (nearest rank): each request's time in the server is at most its
        # client time, so the same order statistic keeps that order; an interpolated median beside a
        # nearest-rank one can put the server's p50 above the client's.
        "server_p50_ms": percentile(in_server, 0.5),
        "run_p50_ms": percentile(runs, 0.5),
    }


def run(args: argparse.Namespace, base: str) -> list[dict[str, Any]]:
    samples = measure(
        base, args.modes, workload=args.workload, params=dict(args.param), requests=args.requests, timeout=args.timeout
    )
    rows = [summarise(mode, samples[mode]) for mode in args.modes]
    print(text_table(rows, COLUMNS))
    if not args.no_files:
        out = args.out or new_results_dir("overhead-")
        out.mkdir(parents=True, exist_ok=True)
        doc = {"url": base, "workload": args.workload, "params": dict(args.param), "rows": rows, "samples": samples}
        (out / "overhead.json").write_text(json.dumps(doc, indent=1) + "\n")
        (out / "overhead.md").write_text(markdown_table(rows, COLUMNS) + "\n")
        print(f"wrote {out / 'overhead.json'}\nwrote {out / 'overhead.md'}")
    return rows


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_args(argv)
    return run_command(lambda: _on_a_server(args))


def _on_a_server(args: argparse.Namespace) -> None:
    with lab_server(args.url, args.server_args, "overhead-server-") as base:
        run(args, base)


if __name__ == "__main__":
    sys.exit(main())
