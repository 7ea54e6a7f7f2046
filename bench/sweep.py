"""The uWSGI tuning experiment: throughput and p95 over a grid of server processes x pool sizes.

    python -m bench.sweep                                  # --processes 1,2,4 x --thread-pool 1,2,4
    python -m bench.sweep --processes 1,2 --process-pool 1,2,4 -p n=5000000

For every point of the grid a fresh server starts (`server.py --port 0`, its
own session, always stopped) and gets one race (bench.race's engine: the same
barrier and /ping probe): `-c` clients start together and each sends `-r`
requests in a row, so after the first burst requests arrive as earlier ones
finish, as in steady traffic. Per-core CPU utilisation is sampled with psutil
meanwhile. --thread-pool sweeps threads behind /threading, --process-pool
workers behind /processing.

Writes sweep.csv, sweep.json and sweep.png (heatmaps of throughput, p95 and
CPU use per point) and names the best point: the highest throughput, ties
going to the lower p95, then to fewer processes.
"""

from __future__ import annotations

import argparse
import csv
import json
import sys
import threading
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import psutil

if __package__ in (None, ""):  # run as `python bench/sweep.py`
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.charts import figures as charts
from bench.lib.args import CONCURRENCY, OUT, PARAM, REPS, SOLO_RUNS, WARMUP, WORKLOAD
from bench.lib.command import new_parser, run_command
from bench.lib.results import machine_facts, new_results_dir
from bench.lib.servers import LocalServer
from bench.lib.tables import Column, columns, text_table
from lab.race.data import Event, RaceSpec, Response, Summary
from lab.race.engine import race
from lab.race.stats import percentile

DEFAULT_PROCESSES = (1, 2, 4)
DEFAULT_THREADS = (1, 2, 4)
# Sized so one request takes a fraction of a second: the default grid
# (9 server start-ups and races) stays a matter of minutes on 2 cores.
DEFAULT_PARAMS = {"count": {"n": "8000000"}}

TABLE = columns(
    Column("processes", "processes", "{:d}"), Column("pool_size", "pool", "{:d}"), Column("throughput_rps", "req/s"),
    Column("p50_s", "p50 s"), Column("p95_s", "p95 s"), "elapsed_s", "ratio", "failed",
    Column("cpu_mean_pct", "cpu %", "{:.0f}"), "ping_p99_ms",
)  # fmt: skip


class CpuSampler:
    """Per-core CPU utilisation (psutil.cpu_percent) every `interval` seconds until stopped.

    System-wide, like mpstat: anything else running on the machine shows too.
    """

    def __init__(self, interval: float = 0.1) -> None:
        self.interval = interval
        self.samples: list[list[float]] = []
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def start(self) -> None:
        psutil.cpu_percent(percpu=True)  # the first call only sets the baseline
        self._thread = threading.Thread(target=self._run, name="cpu-sampler", daemon=True)
        self._thread.start()

    def _run(self) -> None:
        while not self._stop.wait(self.interval):
            self.samples.append(psutil.cpu_percent(percpu=True))

    def stop(self) -> list[float]:
        """Mean utilisation per core, in percent, over the sampled period ([] if never started)."""
        if self._thread is None:
            return []
        if not self._stop.is_set():
            self._stop.set()
            self._thread.join()
            self.samples.append(psutil.cpu_percent(percpu=True))  # the tail since the last sample
        cores = len(self.samples[0])
        return [round(sum(s[i] for s in self.samples) / len(self.samples), 1) for i in range(cores)]


def measure_point(
    processes: int, pool_flag: str, pool_size: int, args: argparse.Namespace, log_dir: Path
) -> dict[str, Any]:
    """Start a server for one grid point, race it while sampling the CPUs, stop it; one CSV row."""
    mode = _mode(pool_flag)
    # The pool not being swept is kept at 1: it only costs start-up time here.
    other = "--process-pool" if mode == "threading" else "--thread-pool"
    flags = ["--processes", str(processes), pool_flag, str(pool_size), other, "1"]
    sampler = CpuSampler()
    native_threads: list[Any] = []

    def on_event(event: Event) -> None:
        # Sample the race itself: not the solo runs before it, nor the server's stop after it.
        if event["event"] == "race":
            native_threads.extend(event["server"].get("native_threads") or [])
            sampler.start()
        elif event["event"] == "done":
            sampler.stop()

    log = log_dir / f"server-p{processes}-{mode}{pool_size}-{time.strftime('%H%M%S')}.log"
    try:
        with LocalServer(flags, log) as server:
            # A sweep ranks throughput, not ratios to an ideal: no capacity measure.
            spec = RaceSpec(server.url, mode, args.workload, args.params, args.concurrency, reps=args.reps,
                            solo_runs=args.solo_runs, warmup_s=args.warmup, measure_capacity=False)  # fmt: skip
            summary, responses, _ = race(spec, on_event)
    finally:
        per_core = sampler.stop()
    point = {"processes": processes, "pool": pool_flag.removeprefix("--"), "pool_size": pool_size, "mode": mode}
    measured = _measured(summary, responses, per_core, args)
    return point | measured | {"flags": " ".join(flags), "native_threads": native_threads}


def _measured(
    summary: Summary, responses: list[Response], per_core: list[float], args: argparse.Namespace
) -> dict[str, Any]:
    """A point's load, the race's throughput and latencies, and the CPUs' use meanwhile."""
    seconds = [r.seconds for r in responses if r.status == 200]
    return {
        "workload": args.workload,
        "params": json.dumps(args.params, sort_keys=True),
        "concurrency": args.concurrency,
        "reps": args.reps,
        "transactions": summary.transactions,
        "failed": summary.failed,
        "elapsed_s": summary.elapsed_s,
        "throughput_rps": summary.throughput_rps,
        "mean_s": summary.mean_s,
        "p50_s": _round(percentile(seconds, 0.5)),
        "p95_s": _round(percentile(seconds, 0.95)),
        "max_s": summary.longest_s,
        "solo_s": summary.solo_s,
        "ideal_s": summary.ideal_s,
        "ratio": summary.ratio,
        "ping_p50_ms": summary.ping_p50_ms,
        "ping_p99_ms": summary.ping_p99_ms,
        "cpu_mean_pct": round(sum(per_core) / len(per_core), 1) if per_core else None,
        **{f"cpu{i}_pct": pct for i, pct in enumerate(per_core)},
        "server_pids": len(summary.server_pids),
        "worker_pids": len(summary.worker_pids),
    }


def _brief(row: dict[str, Any]) -> str:
    return ", ".join(
        f"{text} {row[key]:{fmt}}" if row[key] is not None else f"{text} -"
        for key, text, fmt in (("throughput_rps", "req/s", ".2f"), ("p95_s", "p95 s", ".2f"),
                               ("cpu_mean_pct", "cpu %", ".0f"), ("failed", "failed", "d"))
    )  # fmt: skip


def _round(value: float | None) -> float | None:
    return None if value is None else round(value, 4)


def best_point(rows: Sequence[dict[str, Any]]) -> dict[str, Any] | None:
    """Highest throughput without failures; ties go to the lower p95, then to fewer processes and workers."""
    clean = [r for r in rows if r["failed"] == 0 and r["transactions"] > 0]
    if not clean:
        return None
    return min(clean, key=lambda r: (-r["throughput_rps"], r["p95_s"], r["processes"], r["pool_size"]))


def write_csv(path: Path, rows: Sequence[dict[str, Any]]) -> Path:
    fields: list[str] = []
    for row in rows:
        fields += [key for key in row if key not in fields]  # cpuN columns vary with the machine
    with path.open("w", newline="") as handle:
        writer = csv.DictWriter(handle, fieldnames=fields)
        writer.writeheader()
        for row in rows:  # lists (the server's BLAS pools) as JSON, not Python reprs
            writer.writerow({k: json.dumps(v) if isinstance(v, list | dict) else v for k, v in row.items()})
    return path


def _counts(text: str) -> list[int]:
    try:
        values = [int(v) for v in text.split(",") if v.strip()]
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected comma-separated integers, got {text!r}") from None
    if not values or min(values) < 1 or max(values) > 64:
        raise argparse.ArgumentTypeError(f"expected integers from 1 to 64, got {text!r}")
    return sorted(set(values))


def build_parser() -> argparse.ArgumentParser:
    parser = new_parser("bench.sweep", __doc__)
    parser.add_argument(
        "--processes",
        type=_counts,
        default=list(DEFAULT_PROCESSES),
        metavar="N,N",
        help="server processes to try (default: 1,2,4)",
    )
    pools = parser.add_mutually_exclusive_group()
    pools.add_argument(
        "--thread-pool",
        type=_counts,
        metavar="N,N",
        help="thread-pool sizes to try, racing /threading (default: 1,2,4)",
    )
    pools.add_argument(
        "--process-pool", type=_counts, metavar="N,N", help="process-pool sizes to try, racing /processing"
    )
    WORKLOAD.add(parser, help="workload to race (default: count)")
    PARAM.add(parser, help="workload param, repeatable (default for count: n=8000000)")
    CONCURRENCY.add(parser, help="simultaneous clients (default: 10)")
    REPS.add(parser, default=3, help="requests per client, in a row (default: 3)")
    SOLO_RUNS.add(parser, help="solo requests per point (default: 3)")
    WARMUP.add(parser, default=2.0, help="seconds of load on each fresh server before anything is timed (default: 2)")
    OUT.add(parser, help="results folder (default: bench/results/sweep-<stamp>/)")
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    if not 1 <= args.concurrency <= 200 or not 1 <= args.reps <= 100:
        print("error: -c must be between 1 and 200, -r between 1 and 100", file=sys.stderr)
        return 2
    args.params = dict(args.param) or DEFAULT_PARAMS.get(args.workload, {})
    pool_flag, sizes = (
        ("--process-pool", args.process_pool)
        if args.process_pool
        else ("--thread-pool", args.thread_pool or list(DEFAULT_THREADS))
    )
    out = args.out or new_results_dir("sweep-")
    out.mkdir(parents=True, exist_ok=True)
    grid = [(p, s) for p in args.processes for s in sizes]
    print(
        f"sweep: {len(grid)} points of --processes x {pool_flag}, {_load(args, pool_flag)} at each; "
        f"server logs in {out}",
        file=sys.stderr,
    )
    rows: list[dict[str, Any]] = []
    started = time.monotonic()
    status = run_command(
        lambda: _sweep(grid, pool_flag, args, out, rows), interrupted="interrupted: no results written"
    )
    if status:
        return status
    best = best_point(rows)
    print(text_table(rows, TABLE))
    print(f"\n{_verdict(best, pool_flag)} ({time.monotonic() - started:.0f} s for the sweep)")
    close = runners_up(rows, best) if best else []
    if close:
        points = ", ".join(f"--processes {r['processes']} {pool_flag} {r['pool_size']}" for r in close)
        print(f"within 5% of it, too close to call on one run: {points}")
    for path in _write(out, rows, best, pool_flag, args):
        print(f"wrote {path}")
    return 0


def _sweep(
    grid: list[tuple[int, int]], pool_flag: str, args: argparse.Namespace, out: Path, rows: list[dict[str, Any]]
) -> None:
    """Measure every point of the grid in turn, its row appended to `rows` as it is measured."""
    for number, (processes, size) in enumerate(grid, 1):
        row = measure_point(processes, pool_flag, size, args, out)
        rows.append(row)
        print(f"  [{number}/{len(grid)}] {row['flags']}: {_brief(row)}", file=sys.stderr)


def _mode(pool_flag: str) -> str:
    return "threading" if pool_flag == "--thread-pool" else "processing"


def _query(params: dict[str, str]) -> str:
    return "&".join(f"{k}={v}" for k, v in params.items())


def _load(args: argparse.Namespace, pool_flag: str) -> str:
    url = f"/{_mode(pool_flag)}/{args.workload}?{_query(args.params)}"
    return f"{args.concurrency} clients x {args.reps} requests to {url}"


def runners_up(rows: Sequence[dict[str, Any]], best: dict[str, Any], within: float = 0.05) -> list[dict[str, Any]]:
    """Other clean points within `within` (5 %) of the best throughput: too close to call on one run."""
    floor = best["throughput_rps"] * (1 - within)
    return [r for r in rows if r is not best and r["failed"] == 0 and r["throughput_rps"] >= floor]


def _verdict(best: dict[str, Any] | None, pool_flag: str) -> str:
    if best is None:
        return "no point served every request: no best point"
    return (
        f"best point for this machine: --processes {best['processes']} {pool_flag} {best['pool_size']} "
        f"({best['throughput_rps']:.2f} req/s, p95 {best['p95_s']:.2f} s)"
    )


def _write(
    out: Path, rows: list[dict[str, Any]], best: dict[str, Any] | None, pool_flag: str, args: argparse.Namespace
) -> list[Path]:
    csv_path = write_csv(out / "sweep.csv", rows)
    doc = {
        "grid": {"processes": args.processes, "pool": pool_flag.removeprefix("--")},
        "load": {"workload": args.workload, "params": args.params, "concurrency": args.concurrency, "reps": args.reps},
        "best": best,
        "points": rows,
        "machine": machine_facts(rows[0].get("native_threads") if rows else None),
    }
    json_path = out / "sweep.json"
    json_path.write_text(json.dumps(doc, indent=1) + "\n")
    png = charts.heatmaps(
        out / "sweep.png",
        rows,
        row_key="processes",
        col_key="pool_size",
        panels=[
            ("throughput_rps", "throughput, requests/s (higher is better)", True, ".1f"),
            ("p95_s", "p95 response time, s (lower is better)", False, ".2f"),
            ("cpu_mean_pct", "mean CPU use during the race, % (system-wide)", True, ".0f"),
        ],
        best=best,
        title=f"{_load(args, pool_flag)} per point; outlined: {_verdict(best, pool_flag)}",
        labels={"processes": "--processes", "pool_size": pool_flag},
    )
    return [csv_path, json_path, png]


if __name__ == "__main__":
    sys.exit(main())
