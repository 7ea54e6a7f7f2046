"""Locust driven for the load tools (bench.load, bench.knee, bench.seed): its command line, its CSVs read back
into the seed's tables, and the host and the lab's pool sampled beside it."""

from __future__ import annotations

import csv
import subprocess
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from bench.lib.servers import log_tail
from bench.lib.ticker import Ticker
from lab import ROOT
from lab.race.engine import get

LOCUSTFILE = ROOT / "bench" / "locustfile.py"
INSTALL = "make locust (or: .venv/bin/pip install -r requirements-load.txt)"
# The seed's table, every `every` seconds.
SEED_COLUMNS = ("t_s", "reqs", "fails", "avg_ms", "min_ms", "max_ms", "median_ms", "req_s")
HOST_COLUMNS = ("t_s", "run_queue", "user_pct", "system_pct", "idle_pct", "steal_pct", "pool_running", "pool_waiting")
# How busy the server's pool is now: (jobs running, jobs waiting); None where the server does not say.
PoolReader = Callable[[], tuple[int | None, int | None]]


@dataclass(frozen=True)
class Crowd:
    """Locust's users and how they send: back to back, `rate` each, or `arrivals` per second from all together."""

    users: int = 15
    spawn_rate: float = 0.0  # users started per second; 0: all at once
    requests: int = 300  # stop after this many answers; 0: run for `seconds`
    rate: float = 0.0
    arrivals: float = 0.0
    seconds: int = 300


def lab_pool(base: str, mode: str) -> PoolReader:
    """The lab's pool for `mode`, from /stats: jobs running and waiting, summed over its processes."""

    def read() -> tuple[int | None, int | None]:
        status, body, _, _ = get(f"{base}/stats", 5.0)
        if status != 200 or not isinstance(body, dict):
            return None, None
        pools = [p["pools"].get(mode, {}) for p in body.get("processes", [])]
        return sum(p.get("running", 0) for p in pools), sum(p.get("waiting", 0) for p in pools)

    return read


def mode_of(path: str) -> str:
    """The lab mode a route belongs to: "/processing/count?n=1,/ping" -> "processing"."""
    return path.split(",", maxsplit=1)[0].strip().lstrip("/").split("/")[0].split("?")[0]


class HostSampler(Ticker):
    """vmstat's view of this machine, and the server's pool, every `every` seconds, in a thread."""

    def __init__(self, pool: PoolReader, every: float) -> None:
        super().__init__("host-sampler", every)
        self.pool = pool
        self.rows: list[dict[str, Any]] = []
        self._before: dict[str, int] = {}

    def begin(self) -> None:
        self._before = _cpu_ticks()

    def tick(self) -> None:
        before, after = self._before, _cpu_ticks()
        total = sum(after.values()) - sum(before.values()) or 1
        share = {k: round(100 * (after[k] - before[k]) / total, 1) for k in after}
        running, waiting = self.pool()
        self.rows.append({
            "at": time.time(), "run_queue": _run_queue(), "user_pct": share["user"],
            "system_pct": share["system"], "idle_pct": share["idle"], "steal_pct": share["steal"],
            "pool_running": running, "pool_waiting": waiting,
        })  # fmt: skip
        self._before = after


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


def locust_command(crowd: Crowd, path: str, base: str, prefix: Path) -> list[str]:
    """Locust, headless, on the locustfile; failed requests are what the tables report, not a failed run."""
    return [sys.executable, "-m", "locust", "-f", str(LOCUSTFILE), "--headless", "--host", base,
            "-u", str(crowd.users), "-r", str(crowd.spawn_rate or crowd.users), "--lab-path", path,
            "--lab-requests", str(crowd.requests), "--lab-rate", str(crowd.rate),
            "--lab-arrivals", str(crowd.arrivals), "--lab-log", f"{prefix}_answers.csv",
            "--run-time", f"{crowd.seconds}s", "--csv", str(prefix), "--csv-full-history", "--only-summary",
            "--loglevel", "WARNING", "--exit-code-on-error", "0"]  # fmt: skip


def run_locust(command: list[str], log: Path) -> None:
    """Run Locust with its output (its summary tables, its warnings) in `log`; a failed run is an error naming
    the log's end."""
    with log.open("wb") as file:
        done = subprocess.run(command, check=False, stdout=file, stderr=subprocess.STDOUT)
    if done.returncode != 0:
        raise RuntimeError(f"Locust exited with {done.returncode}; {log} ends:\n{log_tail(log)}")


def measure(base: str, path: str, crowd: Crowd, prefix: Path, *, every: float, pool: PoolReader) -> dict[str, Any]:
    """One Locust run with the host sampled meanwhile: its seed-shaped table and the host's, on one clock."""
    with HostSampler(pool, every) as host:
        run_locust(locust_command(crowd, path, base, prefix), Path(f"{prefix}_locust.log"))
    seed, start = seed_table(prefix, every)
    # The host's samples on the same clock as Locust's rows: seconds since its first.
    end = start + (seed[-1]["t_s"] if seed else 0) + every / 2
    host_rows = [{"t_s": round(r.pop("at") - start), **r} for r in host.rows if start <= r["at"] <= end]
    final = _aggregated(Path(f"{prefix}_stats.csv"))
    # The whole run's figures (a history row's percentiles are Locust's last few seconds').
    totals = _seed_row(final[0], seed[-1]["t_s"] if seed else 0, crowd.users, prefix="") if final else {}
    return {"locust": seed, "host": host_rows, "totals": totals}


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
    cells = [[str(c) for c in columns], *[[_cell(r.get(c)) for c in columns] for r in rows]]
    widths = [max(len(line[i]) for line in cells) for i in range(len(columns))]
    return "\n".join("  ".join(cell.rjust(w) for cell, w in zip(line, widths, strict=True)) for line in cells)


def _cell(value: Any) -> str:
    if value is None:
        return "-"
    return value if isinstance(value, str) else f"{value:g}"
