"""Bench results: the summary row, its text and Markdown tables, machine facts, result folders."""

from __future__ import annotations

import importlib.metadata
import math
import os
import platform
import re
import shutil
import subprocess
import sys
import time
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import psutil

from lab.config import DEFAULT_RESULTS, cpu_count

RESULTS = DEFAULT_RESULTS  # where the server's GET /compare looks too

# summary.json rows carry these keys first (docs/bench.md); extras may follow.
ROW_KEYS = ("endpoint", "elapsed_s", "mean_s", "shortest_s", "longest_s", "transactions", "failed", "ideal_s", "ratio")


def spread_text(spread: Mapping[str, int]) -> str:
    """A spread, {pid: requests}, as people read it: "6/4", busiest first."""
    return "/".join(str(count) for count in sorted(spread.values(), reverse=True))


@dataclass(frozen=True)
class Column:
    """One table column: the row key, its header, and how a value is shown."""

    key: str
    header: str
    fmt: str = "{:.2f}"

    def show(self, row: Mapping[str, Any]) -> str:
        value = row.get(self.key)
        if value is None or (isinstance(value, float) and math.isnan(value)):
            return "-"
        if isinstance(value, str):
            return value
        if isinstance(value, dict):
            return spread_text(value) or "-"
        return self.fmt.format(value)


# A ratio to the nominal ideal below this says more about `t` than about the server: it was timed
# on a slower moment of the host than the burst. Never shown bare (ratio_notes).
SLOW_T_RATIO = 0.95


@dataclass(frozen=True)
class RatioColumn(Column):
    """The ratio to the nominal ideal, marked with * where it is below SLOW_T_RATIO."""

    def show(self, row: Mapping[str, Any]) -> str:
        shown = super().show(row)
        value = row.get(self.key)
        return f"{shown}*" if isinstance(value, float) and value < SLOW_T_RATIO else shown


def ratio_notes(rows: Iterable[Mapping[str, Any]]) -> list[str]:
    """What a table's starred ratios mean, one line each, to print under it."""
    notes = []
    for row in rows:
        value = row.get("ratio")
        if isinstance(value, float) and value < SLOW_T_RATIO:
            own = row.get("cpu_ratio")
            against = (f"against the runs' own CPU time it took {own:.2f}x" if own is not None
                       else "no ideal from the runs' own CPU time here")  # fmt: skip
            notes.append(f"* {row.get('endpoint', '')}: ratio {value:.2f} is below 1 because t was timed on a slower "
                         f"moment of the host than the burst; {against}.")  # fmt: skip
    return notes


COLUMNS = (
    Column("endpoint", "endpoint", "{}"),
    Column("elapsed_s", "elapsed s"),
    Column("mean_s", "mean s"),
    Column("shortest_s", "shortest s"),
    Column("longest_s", "longest s"),
    Column("transactions", "trans", "{:d}"),
    Column("failed", "failed", "{:d}"),
    Column("ideal_s", "ideal s"),
    RatioColumn("ratio", "ratio"),
    Column("cpu_ratio", "cpu ratio"),
)

# How the requests spread over server processes (forked servers): "6/4".
SPREAD_COLUMN = Column("spread", "spread", "{}")

PING_COLUMNS = (
    Column("ping_p50_ms", "ping p50 ms", "{:.1f}"),
    Column("ping_p99_ms", "ping p99 ms", "{:.1f}"),
    Column("ping_max_ms", "ping max ms", "{:.1f}"),
)


# What the race's instruments add (bench/race_data.py's Summary): the ratio to the ideal this machine
# can reach (its measured parallel capacity), where the runs' time went (computing, waiting for a
# core, blocked, and of that the GIL's part: shares of their run time), the server's GIL and core
# meters at worst.
INSTRUMENT_COLUMNS = (
    Column("reachable_ratio", "reach ratio"),
    Column("cpu_share", "cpu share"),
    Column("core_wait_share", "core wait"),
    Column("blocked_share", "blocked"),
    Column("gil_wait_share", "GIL wait"),
    Column("gil_max", "GIL max"),
    Column("core_wait_max", "core max"),
)

# Columns that mean the same wherever a table shows them, so they read alike: a table names them by key.
SHARED = {
    column.key: column
    for column in (*COLUMNS, SPREAD_COLUMN, *PING_COLUMNS, *INSTRUMENT_COLUMNS,
                   Column("concurrency", "concurrency", "{:d}"), Column("peak_threads", "threads", "{:d}"))
}  # fmt: skip


def columns(*picks: str | Column) -> tuple[Column, ...]:
    """A table's columns: a shared one by its key, any other key as text under its own name, or a Column of its own."""
    return tuple(pick if isinstance(pick, Column) else SHARED.get(pick) or Column(pick, pick, "{}") for pick in picks)


def ratio(elapsed_s: float, ideal_s: float) -> float:
    """elapsed / ideal: 1.0 is the best this machine can do, 2.0 took twice as long."""
    return round(elapsed_s / ideal_s, 3) if ideal_s > 0 else float("nan")


def median(values: Sequence[float]) -> float:
    """The middle value (mean of the two middle ones for an even count)."""
    if not values:
        raise ValueError("median of no values")
    ordered = sorted(values)
    middle = len(ordered) // 2
    return ordered[middle] if len(ordered) % 2 else (ordered[middle - 1] + ordered[middle]) / 2


def percentile(values: Sequence[float], q: float) -> float | None:
    """Nearest-rank percentile (q in 0..1); None for no values."""
    if not values:
        return None
    ordered = sorted(values)
    return ordered[max(0, min(len(ordered) - 1, math.ceil(q * len(ordered)) - 1))]


def _notes(rows: Sequence[Mapping[str, Any]], columns: Sequence[Column]) -> list[str]:
    """The lines a table's starred ratios need under it (none if it shows no RatioColumn)."""
    return ratio_notes(rows) if any(isinstance(c, RatioColumn) for c in columns) else []


def text_table(rows: Iterable[Mapping[str, Any]], columns: Sequence[Column] = COLUMNS) -> str:
    """A plain, aligned table: text left-aligned, numbers right-aligned; what a starred ratio means under it."""
    rows = list(rows)
    cells = [[c.header for c in columns]] + [[c.show(row) for c in columns] for row in rows]
    widths = [max(len(line[i]) for line in cells) for i in range(len(columns))]

    def line(values: list[str]) -> str:
        first = values[0].ljust(widths[0])
        rest = (v.rjust(w) for v, w in zip(values[1:], widths[1:], strict=True))
        return "  ".join([first, *rest]).rstrip()

    rule = "  ".join("-" * w for w in widths)
    return "\n".join([line(cells[0]), rule, *(line(values) for values in cells[1:]), *_notes(rows, columns)])


def markdown_table(rows: Iterable[Mapping[str, Any]], columns: Sequence[Column] = COLUMNS) -> str:
    """The same table in GitHub Markdown."""
    rows = list(rows)
    header = "| " + " | ".join(c.header for c in columns) + " |"
    align = "|" + "|".join(":---" if i == 0 else "---:" for i in range(len(columns))) + "|"
    body = ["| " + " | ".join(c.show(row).replace("*", "\\*") for c in columns) + " |" for row in rows]
    notes = _notes(rows, columns)
    return "\n".join([header, align, *body, *(["", *notes] if notes else [])])


def new_results_dir(prefix: str = "", root: Path = RESULTS) -> Path:
    """A fresh bench/results/<prefix><timestamp>/ (a suffix keeps two runs in one second apart)."""
    stamp = time.strftime("%Y%m%d-%H%M%S")
    for attempt in range(100):
        path = root / f"{prefix}{stamp}{f'-{attempt}' if attempt else ''}"
        try:
            path.mkdir(parents=True)
        except FileExistsError:
            continue
        return path
    raise RuntimeError(f"could not create a fresh results folder under {root}")


def cpu_model() -> str:
    """The CPU's marketing name, from /proc/cpuinfo where there is one."""
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.lower().startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def siege_version() -> str | None:
    """`siege --version` (it prints to stderr); None without siege."""
    siege = shutil.which("siege")
    if siege is None:
        return None
    try:
        done = subprocess.run([siege, "--version"], capture_output=True, text=True, timeout=10, check=False)
    except (OSError, subprocess.TimeoutExpired):
        return None
    match = re.search(r"SIEGE\s+(\S+)", done.stdout + done.stderr)
    return match.group(1) if match else None


def _version(distribution: str) -> str | None:
    try:
        return importlib.metadata.version(distribution)
    except importlib.metadata.PackageNotFoundError:
        return None


def machine_facts(native_threads: list[dict[str, Any]] | None, **extra: Any) -> dict[str, Any]:
    """Cores, CPU, Python and library versions; `native_threads` as a server's /stats reports them.

    The BLAS/OpenMP pool sizes that matter are the server's (it caps them when
    it starts), so they come from the server measured, not from this process.
    """
    return {
        "cores": cpu_count(),
        "logical_cpus": os.cpu_count(),
        "physical_cores": psutil.cpu_count(logical=False),
        "cpu_model": cpu_model(),
        "memory_bytes": psutil.virtual_memory().total,
        "platform": platform.platform(),
        "python": sys.version.split()[0],
        "python_implementation": platform.python_implementation(),
        "versions": {
            "tornado": _version("tornado"),
            "numpy": _version("numpy"),
            "scikit-learn": _version("scikit-learn"),
            "threadpoolctl": _version("threadpoolctl"),
            "psutil": _version("psutil"),
            "distributed": _version("distributed"),
            "siege": siege_version(),
        },
        "native_threads": native_threads,
        "recorded_at": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
        **extra,
    }
