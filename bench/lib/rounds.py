"""Rounds: the same races again, in turn, summarised as a median and a range (bench.race, siege.sh, compare).

One race on a shared host is one sample of a speed that moves from minute
to minute. `--rounds N` runs every endpoint N times, round-robin (A, B, C,
then A, B, C again, so that a slow minute falls on all of them alike), and
prints each figure's median and range. Like pyperf's "the benchmark seems
unstable" warning, it says so when the solo run time `t` itself moved by more
than UNSTABLE_T of its median: then the nominal ratio (from `t`) is less to
be trusted than the cpu ratio (from the burst's own CPU time).
"""

from __future__ import annotations

import json
import statistics
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any, TypeVar

T = TypeVar("T")

# A range of t wider than this share of its median: the host was unstable.
UNSTABLE_T = 0.15
# The figures summarised, as (row key, column title).
FIGURES = (
    ("elapsed_s", "makespan s"),
    ("solo_s", "t s"),
    ("ideal_s", "ideal s"),
    ("ratio", "ratio"),
    ("cpu_ratio", "cpu ratio"),
)


def schedule(items: Sequence[T], rounds: int) -> list[tuple[int, T]]:
    """(round, item) in the order to run them: every item once per round, rounds one after another."""
    return [(number, item) for number in range(1, rounds + 1) for item in items]


def spread(values: Iterable[float | None]) -> dict[str, float] | None:
    """median, min and max of the known values; None if there are none."""
    known = [float(v) for v in values if v is not None]
    if not known:
        return None
    return {"median": statistics.median(known), "min": min(known), "max": max(known)}


def summarise(rows: Sequence[Mapping[str, Any]], group: str = "endpoint") -> list[dict[str, Any]]:
    """Per group (in first-seen order): how many rounds, each figure's spread, and an instability note."""
    groups: dict[str, list[Mapping[str, Any]]] = {}
    for row in rows:
        groups.setdefault(str(row[group]), []).append(row)
    summary = []
    for name, members in groups.items():
        entry: dict[str, Any] = {group: name, "rounds": len(members)}
        for key, _ in FIGURES:
            entry[key] = spread(row.get(key) for row in members)
        entry["unstable"] = instability(name, entry["solo_s"], len(members))
        summary.append(entry)
    return summary


def instability(name: str, t: Mapping[str, float] | None, rounds: int) -> str | None:
    """A sentence if t ranged over more than UNSTABLE_T of its median, else None."""
    if t is None or rounds < 2 or t["median"] <= 0:
        return None
    width = (t["max"] - t["min"]) / t["median"]
    if width <= UNSTABLE_T:
        return None
    return (
        f"the host was unstable during {name}: t ranged {t['min']:.3g}-{t['max']:.3g} s ({width:.0%} of its median) "
        f"over {rounds} rounds; trust the cpu ratio over the ratio"
    )


def save(rows: Sequence[Mapping[str, Any]], group: str, path: Path) -> str | None:
    """With more than one round: the summary written to `path`, and the table to print under its title."""
    several = max((int(row.get("round", 1)) for row in rows), default=1)
    if several < 2:
        return None
    summary = summarise(rows, group=group)
    path.write_text(json.dumps(summary, indent=1) + "\n")
    return f"over {several} rounds, in turn:\n{table(summary, group=group)}"


def _cell(figure: Mapping[str, float] | None) -> str:
    if figure is None:
        return "-"
    return f"{figure['median']:.3g} ({figure['min']:.3g}-{figure['max']:.3g})"


def table(summary: Sequence[Mapping[str, Any]], group: str = "endpoint") -> str:
    """The medians and ranges, one line per group, then any instability warnings."""
    head = [group, "rounds", *(f"{title} median (range)" for _, title in FIGURES)]
    rows = [[str(s[group]), str(s["rounds"]), *(_cell(s[key]) for key, _ in FIGURES)] for s in summary]
    widths = [max(len(line[i]) for line in [head, *rows]) for i in range(len(head))]
    lines = [
        "  ".join(cell.ljust(width) for cell, width in zip(line, widths, strict=True)).rstrip()
        for line in [head, *rows]
    ]
    lines.insert(1, "  ".join("-" * width for width in widths))
    lines += [f"warning: {s['unstable']}" for s in summary if s["unstable"]]
    return "\n".join(lines)
