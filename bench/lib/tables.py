"""The bench's tables: the summary row's columns, shown as aligned text or as GitHub Markdown."""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

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


# What the race's instruments add (lab/race/data.py's Summary): the ratio to the ideal this machine
# can reach (its measured parallel capacity), where the runs' time went (computing, waiting for a
# core, waiting on purpose, blocked, and of that the GIL's part: shares of their run time), the
# server's GIL and core meters at worst.
INSTRUMENT_COLUMNS = (
    Column("reachable_ratio", "reach ratio"),
    Column("cpu_share", "cpu share"),
    Column("core_wait_share", "core wait"),
    Column("io_wait_share", "io wait"),
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
