"""The C10k lesson: how many waits each model can hold, at 10, 100 and 1000 concurrent requests.

    python -m bench.scale                          # 0.1 s waits at 10, 100, 1000: about a minute and a half
    python -m bench.scale --seconds 1              # one-second waits: 6 threads take ~167 s for 1000
    python -m bench.scale --levels 10,100 --series async,threads

Every request only waits (`sleep` in a pool, or /async's upstream delay), so
cores do not matter: what limits each model is how many waits it can hold at
once. Series:

  async       /async?delay=S: one event loop holds every wait (one server process)
  threads     /threading/sleep: a pool of --thread-pool threads (6 by default)
  processes   /processing/sleep: a pool of --process-pool workers (2 by default)
  per-thread  /threading/sleep with a thread per request (--thread-pool = the concurrency):
              threads can hold them all too, at a price in memory

At each level the requests are released together from one asyncio client (a
connection each), and the server's whole process tree (server, pool workers,
upstream) is sampled meanwhile. Per level: makespan and its ideal (lab/race/ideal.py:
ceil(N / lanes) waits), failures, and the memory each waiting request cost:
the tree's peak RSS above its RSS just before, divided by N. The pool series
run with --max-pending above the largest level, so nothing is turned away.

Writes scale.json, scale.md and scale.png (makespan and memory per request
against concurrency) to bench/results/scale-<timestamp>/.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
import time
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from pathlib import Path

if __package__ in (None, ""):  # run as `python bench/scale.py`
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.charts import figures as charts
from bench.lib.args import OUT
from bench.lib.burst import burst
from bench.lib.command import new_parser, run_command
from bench.lib.limits import ensure_open_files
from bench.lib.results import machine_facts, new_results_dir
from bench.lib.servers import LocalServer, TreeWatcher, tree
from bench.lib.tables import Column, columns, markdown_table, text_table
from lab.race.engine import server_facts
from lab.race.ideal import ideal_makespan

SERIES = ("async", "threads", "processes", "per-thread")
DEFAULT_LEVELS = (10, 100, 1000)
MAX_LEVEL = 10_000  # the C10k: needs about 20,500 open files (bench/lib/limits.py)


@dataclass(frozen=True)
class Series:
    name: str
    mode: str
    path: str  # with {seconds}
    flags: tuple[str, ...]
    per_request_threads: bool = False

    def server_flags(self, level: int) -> list[str]:
        return [*self.flags, *(["--thread-pool", str(level)] if self.per_request_threads else [])]


def series_of(thread_pool: int, process_pool: int, top: int) -> dict[str, Series]:
    pending = ("--max-pending", str(top * 2))
    return {
        "async": Series("async", "async", "/async?delay={seconds}", ("--process-pool", "1")),
        "threads": Series(
            "threads", "threading", "/threading/sleep?seconds={seconds}", ("--thread-pool", str(thread_pool), *pending)
        ),
        "processes": Series(
            "processes",
            "processing",
            "/processing/sleep?seconds={seconds}",
            ("--process-pool", str(process_pool), *pending),
        ),
        "per-thread": Series(
            "per-thread", "threading", "/threading/sleep?seconds={seconds}", pending, per_request_threads=True
        ),
    }


@dataclass
class Point:
    series: str
    concurrency: int
    seconds: float
    elapsed_s: float
    ideal_s: float
    ratio: float
    ok: int
    failed: int
    mean_s: float
    longest_s: float
    rss_before_mb: float
    rss_peak_mb: float
    kb_per_request: float
    peak_threads: int
    peak_processes: int
    flags: str


def measure(series: Series, level: int, seconds: float, log_dir: Path) -> Point:
    flags = series.server_flags(level)
    target = series.path.format(seconds=seconds)
    with LocalServer(flags, log_dir / f"server-{series.name}-{level}.log") as server:
        facts = server_facts(server.url, 30)
        pid = server.pid
        watcher = TreeWatcher(lambda: tree(pid), interval=0.05)
        before = watcher.sample().rss
        with watcher:
            results = asyncio.run(burst(server.url, target, level, allowed=level * seconds + 120))
    peaks = watcher.peaks
    ok = [r for r in results if r[2] == 200]
    start, end = min(r[0] for r in results), max(r[1] for r in results)
    durations = [r[1] - r[0] for r in results]
    workload = "upstream" if series.mode == "async" else "sleep"
    ideal = ideal_makespan(series.mode, workload, facts, seconds, level)
    return Point(
        series=series.name,
        concurrency=level,
        seconds=seconds,
        elapsed_s=round(end - start, 3),
        ideal_s=round(ideal, 3),
        ratio=round((end - start) / ideal, 3),
        ok=len(ok),
        failed=len(results) - len(ok),
        mean_s=round(sum(durations) / len(durations), 3),
        longest_s=round(max(durations), 3),
        rss_before_mb=round(before / 2**20, 1),
        rss_peak_mb=peaks.rss_mb,
        kb_per_request=round(max(0, peaks.rss - before) / 1024 / level, 1),
        peak_threads=peaks.threads,
        peak_processes=peaks.processes,
        flags=" ".join(flags),
    )


TABLE = columns(
    "series", "concurrency", "elapsed_s", "ideal_s", "ratio", "failed", "longest_s",
    Column("kb_per_request", "KB/request", "{:.1f}"), "peak_threads", Column("peak_processes", "processes", "{:d}"),
)  # fmt: skip


def _levels(text: str) -> list[int]:
    try:
        values = sorted({int(v) for v in text.split(",") if v.strip()})
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected comma-separated integers, got {text!r}") from None
    if not values or values[0] < 1 or values[-1] > MAX_LEVEL:
        raise argparse.ArgumentTypeError(f"levels go from 1 to {MAX_LEVEL:,}, got {text!r}")
    return values


def _names(text: str) -> list[str]:
    names = [v.strip() for v in text.split(",") if v.strip()]
    unknown = set(names) - set(SERIES)
    if not names or unknown:
        raise argparse.ArgumentTypeError(f"series are {', '.join(SERIES)}; got {text!r}")
    return names


def build_parser() -> argparse.ArgumentParser:
    parser = new_parser("bench.scale", __doc__)
    parser.add_argument("--levels", type=_levels, default=list(DEFAULT_LEVELS), metavar="N,N",
                        help="concurrency levels (default: 10,100,1000)")  # fmt: skip
    parser.add_argument("--series", type=_names, default=list(SERIES), metavar="NAME,NAME",
                        help=f"which series (default: {','.join(SERIES)})")  # fmt: skip
    parser.add_argument("--seconds", type=float, default=0.1, metavar="S",
                        help="each request's wait, the sleep or the upstream delay (default: 0.1)")  # fmt: skip
    parser.add_argument("--thread-pool", type=int, default=6, metavar="N", help="threads of 'threads' (default: 6)")
    parser.add_argument("--process-pool", type=int, default=2, metavar="N",
                        help="workers of 'processes' (default: 2)")  # fmt: skip
    OUT.add(parser, help="results folder (default: bench/results/scale-<stamp>/)")
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    if not 0 < args.seconds <= 30:
        print("error: --seconds must be above 0 and at most 30", file=sys.stderr)
        return 2
    ensure_open_files(max(args.levels))  # or exit 2 saying how: this process and the servers it starts
    out = args.out or new_results_dir("scale-")
    out.mkdir(parents=True, exist_ok=True)
    points: list[Point] = []
    started = time.monotonic()
    status = run_command(lambda: _measure_all(args, out, points), interrupted="interrupted: no results written")
    if status:
        return status
    rows = [asdict(p) for p in points]
    print(text_table(rows, TABLE))
    print(f"\n{_finding(points)} ({time.monotonic() - started:.0f} s in all)")
    (out / "scale.json").write_text(json.dumps({"points": rows, "machine": machine_facts(None)}, indent=1) + "\n")
    (out / "scale.md").write_text(f"# bench.scale, {args.seconds:g} s waits\n\n{markdown_table(rows, TABLE)}\n\n"
                                  f"{_finding(points)}\n")  # fmt: skip
    chart = charts.scale(out / "scale.png", rows)
    for path in (out / "scale.json", out / "scale.md", chart):
        print(f"wrote {path}")
    return 0


def _measure_all(args: argparse.Namespace, out: Path, points: list[Point]) -> None:
    """Every level of every series in turn, each point appended to `points` as it is measured."""
    catalog = series_of(args.thread_pool, args.process_pool, max(args.levels))
    for name in args.series:
        for level in args.levels:
            point = measure(catalog[name], level, args.seconds, out)
            points.append(point)
            print(f"  {name:<11} {level:>5}: {point.elapsed_s:.2f} s (ideal {point.ideal_s:.2f}), "
                  f"{point.failed} failed, {point.kb_per_request:.1f} KB/request", file=sys.stderr)  # fmt: skip


def _finding(points: Sequence[Point]) -> str:
    """One sentence from the largest level measured."""
    top = max(p.concurrency for p in points)
    parts = [f"{p.series} {p.elapsed_s:.1f} s ({p.kb_per_request:.0f} KB each)" for p in points if p.concurrency == top]
    return f"{top} waits of {points[0].seconds:g} s took: " + ", ".join(parts) + "."


if __name__ == "__main__":
    sys.exit(main())
