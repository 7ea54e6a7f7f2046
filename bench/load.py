"""Load as users bring it: Locust users against one lab route, headless, with the server watched meanwhile.

    python -m bench.load                                   # the seed: 15 users until 300 requests, /threading
    python -m bench.load --path '/processing/count?n=20000000'
    python -m bench.load --url http://127.0.0.1:8000 --users 50 --rate 1 --requests 0 --seconds 60

The seed is the uWSGI tuning write-up's experiment: 15 simulated users, each
sending its next request as soon as the last is answered, until 300 requests,
a table every 3 s (reqs, fails, avg, min, max, median, req/s), with vmstat
beside it on the server. Here the second table samples the same seconds
from /proc (the run queue; CPU user, system, idle and steal, in % of all
cores) and the lab's /stats (how many jobs each pool of the route's mode is
running and queueing). `--rate R` paces each user to R requests/s instead:
an arrival rate, the open model (users x rate requests/s are offered whether
or not the server keeps up).

Writes to bench/results/load-<stamp>/ (or --out): Locust's CSVs (locust_stats,
locust_stats_history, locust_failures, locust_exceptions), load.json (both
tables) and load.png (req/s, median and 95th percentile latency, failures,
users, and the server's CPU and run queue over time). Needs Locust
(make locust installs it).
"""

from __future__ import annotations

import argparse
import csv
import json
import subprocess
import sys
import threading
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

if __package__ in (None, ""):  # run as `python bench/load.py`: make the `bench` package importable
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench import charts
from bench.args import OUT, SERVER_ARGS, URL, check_ranges, new_parser, run_command
from bench.engine import get
from bench.optional import need_module
from bench.servers import lab_server
from bench.summary import new_results_dir
from lab import ROOT

LOCUSTFILE = ROOT / "bench" / "locustfile.py"
INSTALL = "make locust (or: .venv/bin/pip install -r requirements-load.txt)"
# The seed's table, every `every` seconds.
SEED_COLUMNS = ("t_s", "reqs", "fails", "avg_ms", "min_ms", "max_ms", "median_ms", "req_s")
HOST_COLUMNS = ("t_s", "run_queue", "user_pct", "system_pct", "idle_pct", "steal_pct", "pool_running", "pool_waiting")


class HostSampler:
    """vmstat's view of this machine, and the lab's pool for one mode, every `every` seconds, in a thread."""

    def __init__(self, base: str, mode: str, every: float) -> None:
        self.base, self.mode, self.every = base, mode, every
        self.rows: list[dict[str, Any]] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="host-sampler", daemon=True)

    def __enter__(self) -> HostSampler:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()

    def _run(self) -> None:
        before = _cpu_ticks()
        while not self._stop.wait(self.every):
            after = _cpu_ticks()
            total = sum(after.values()) - sum(before.values()) or 1
            share = {k: round(100 * (after[k] - before[k]) / total, 1) for k in after}
            running, waiting = self._pool()
            self.rows.append({
                "at": time.time(), "run_queue": _run_queue(), "user_pct": share["user"],
                "system_pct": share["system"], "idle_pct": share["idle"], "steal_pct": share["steal"],
                "pool_running": running, "pool_waiting": waiting,
            })  # fmt: skip
            before = after

    def _pool(self) -> tuple[int | None, int | None]:
        status, body, _, _ = get(f"{self.base}/stats", 5.0)
        if status != 200 or not isinstance(body, dict):
            return None, None
        pools = [p["pools"].get(self.mode, {}) for p in body.get("processes", [])]
        return sum(p.get("running", 0) for p in pools), sum(p.get("waiting", 0) for p in pools)


def _cpu_ticks() -> dict[str, int]:
    """/proc/stat's first line: jiffies of all cores in user (+nice), system (+irq), idle (+iowait), steal."""
    fields = [int(x) for x in Path("/proc/stat").read_text().splitlines()[0].split()[1:9]]
    user, nice, system, idle, iowait, irq, softirq, steal = fields
    return {"user": user + nice, "system": system + irq + softirq, "idle": idle + iowait, "steal": steal}


def _run_queue() -> int:
    """Threads runnable now, this sampler's own included: vmstat's r column (/proc/stat procs_running)."""
    for line in Path("/proc/stat").read_text().splitlines():
        if line.startswith("procs_running"):
            return int(line.split()[1])
    return 0


def locust_command(args: argparse.Namespace, base: str, prefix: Path) -> list[str]:
    """Locust, headless, on the locustfile; failed requests are what the tables report, not a failed run."""
    return [sys.executable, "-m", "locust", "-f", str(LOCUSTFILE), "--headless", "--host", base,
            "-u", str(args.users), "-r", str(args.spawn_rate or args.users), "--lab-path", args.path,
            "--lab-requests", str(args.requests), "--lab-rate", str(args.rate), "--run-time", f"{args.seconds}s",
            "--csv", str(prefix), "--csv-full-history", "--only-summary", "--loglevel", "WARNING",
            "--exit-code-on-error", "0"]  # fmt: skip


def _aggregated(path: Path) -> list[dict[str, str]]:
    """The "Aggregated" rows of one of Locust's CSVs."""
    return [row for row in csv.DictReader(path.read_text().splitlines()) if row["Name"] == "Aggregated"]


def _seed_row(row: dict[str, str], since: int, users: int, prefix: str = "Total ") -> dict[str, Any]:
    """One row in the seed's columns from a history row (its "Total ..." columns) or the final totals (prefix "")."""
    return {
        "t_s": since, "reqs": int(row[f"{prefix}Request Count"]), "fails": int(row[f"{prefix}Failure Count"]),
        "avg_ms": _num(row[f"{prefix}Average Response Time"]), "min_ms": _num(row[f"{prefix}Min Response Time"]),
        "max_ms": _num(row[f"{prefix}Max Response Time"]), "median_ms": _num(row[f"{prefix}Median Response Time"]),
        "p95_ms": _num(row["95%"]), "users": users,
    }  # fmt: skip


def seed_table(prefix: Path, every: float) -> tuple[list[dict[str, Any]], float]:
    """Locust's history, a row per `every` seconds in the seed's columns, then its final totals (the history is
    written once a second, the totals at the end); and when the history starts (epoch seconds)."""
    history = _aggregated(Path(f"{prefix}_stats_history.csv"))
    if not history:
        return [], time.time()
    start, due = int(history[0]["Timestamp"]), every
    table: list[dict[str, Any]] = []
    for row in history:
        since = int(row["Timestamp"]) - start
        if since >= due:
            table.append(_seed_row(row, since, int(row["User Count"])))
            due = since + every
    final = _aggregated(Path(f"{prefix}_stats.csv"))
    if final and (not table or int(final[0]["Request Count"]) > table[-1]["reqs"]):
        users = int(history[-1]["User Count"])
        table.append(_seed_row(final[0], int(history[-1]["Timestamp"]) - start + 1, users, prefix=""))
    while len(table) > 1 and table[-1]["reqs"] == table[-2]["reqs"]:
        table.pop()  # the seconds after the last answer, while Locust wound down
    # Each row's throughput: the answers since the row before, over the seconds since it.
    seconds, answers = 0, 0
    for entry in table:
        entry["req_s"] = round((entry["reqs"] - answers) / max(1, entry["t_s"] - seconds), 2)
        seconds, answers = entry["t_s"], entry["reqs"]
    return table, float(start)


def _num(text: str) -> float | None:
    try:
        return round(float(text), 1)
    except ValueError:  # "N/A" before the first answer
        return None


def text(rows: Sequence[dict[str, Any]], columns: Sequence[str]) -> str:
    cells = [[str(c) for c in columns], *[["-" if r.get(c) is None else f"{r[c]:g}" for c in columns] for r in rows]]
    widths = [max(len(line[i]) for line in cells) for i in range(len(columns))]
    return "\n".join("  ".join(cell.rjust(w) for cell, w in zip(line, widths, strict=True)) for line in cells)


def build_parser() -> argparse.ArgumentParser:
    parser = new_parser("bench.load", __doc__)
    URL.add(parser)
    parser.add_argument("--path", default="/threading/count?n=20000000", help="the route (several: comma-separated)")
    parser.add_argument("--users", type=int, default=15, help="simulated users (default: 15)")
    parser.add_argument("--spawn-rate", type=float, default=0, help="users started per second (default: all at once)")
    parser.add_argument("--requests", type=int, default=300, help="stop after this many answers; 0: --seconds only")
    parser.add_argument("--rate", type=float, default=0.0, help="requests/s per user (default 0: back to back)")
    parser.add_argument("--seconds", type=int, default=300, help="stop after this long at most (default: 300)")
    parser.add_argument("--every", type=float, default=3.0, help="seconds between table rows (default: 3)")
    OUT.add(parser, help="results folder (default: bench/results/load-<stamp>/)")
    SERVER_ARGS.add(parser, help="flags for the server started when --url is not given")
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    check_ranges(parser, ("--users", args.users, 1, 10_000), ("--seconds", args.seconds, 1, 86_400))
    need_module("locust", "Locust", INSTALL, tool="bench.load")
    return run_command(lambda: _run(args))


def _run(args: argparse.Namespace) -> None:
    out = args.out or new_results_dir("load-")
    out.mkdir(parents=True, exist_ok=True)
    mode = args.path.split(",")[0].strip().lstrip("/").split("/")[0].split("?")[0]
    with lab_server(args.url, args.server_args, "load-server-") as base, HostSampler(base, mode, args.every) as host:
        print(f"{args.users} users on {base}{args.path}" + (f" at {args.rate:g} req/s each" if args.rate else ""),
              file=sys.stderr)  # fmt: skip
        subprocess.run(locust_command(args, base, out / "locust"), check=True, stdout=subprocess.DEVNULL)
    seed, start = seed_table(out / "locust", args.every)
    # The host's samples on the same clock as Locust's rows: seconds since its first.
    end = start + (seed[-1]["t_s"] if seed else 0) + args.every / 2
    host_rows = [{"t_s": round(r.pop("at") - start), **r} for r in host.rows if start <= r["at"] <= end]
    (out / "load.json").write_text(json.dumps({"path": args.path, "users": args.users, "rate": args.rate,
                                               "requests": args.requests, "locust": seed, "host": host_rows},
                                              indent=1) + "\n")  # fmt: skip
    print(text(seed, SEED_COLUMNS))
    print()
    print(text(host_rows, HOST_COLUMNS))
    print(f"wrote {out / 'load.json'}\nwrote {charts.load(out / 'load.png', seed, host_rows)}")


if __name__ == "__main__":
    sys.exit(main())
