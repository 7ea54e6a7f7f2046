"""What a burst's response times look like, in words: a staircase, all late, waves, or all together.

siege.sh prints one sentence under its table from these (bench/siege_steps.py's report): the article's lesson
said from the measured numbers of this run, not from a fixed text.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

# Two answers more than this share of one request alone (t) apart belong to different steps or waves:
# a run's own noise is far smaller, and the next step of a queue is a whole t later.
STEP_GAP = 0.5
# The first answer later than this many t, and all of them within BUNCHED of the last one's time:
# nobody was served before the others (threads taking turns on the GIL).
LATE = 2.0
BUNCHED = 0.25


@dataclass(frozen=True)
class Shape:
    """The response times of one endpoint's burst, grouped: `groups` holds each step's or wave's size."""

    kind: str  # "staircase", "late", "waves" or "together"
    groups: tuple[int, ...]
    first_s: float
    last_s: float
    t_s: float


def groups(times: Sequence[float], t: float) -> list[list[float]]:
    """The sorted times cut where two neighbours are more than STEP_GAP x t apart."""
    cut: list[list[float]] = []
    for time in sorted(times):
        if cut and time - cut[-1][-1] <= STEP_GAP * t:
            cut[-1].append(time)
        else:
            cut.append([time])
    return cut


def shape(times: Sequence[float], t: float | None) -> Shape | None:
    """The burst's shape from its response times and t (the median of solo runs); None without times."""
    if not times:
        return None
    ordered = sorted(times)
    unit = t if t and t > 0 else max(ordered[0], 1e-3)
    cut = groups(ordered, unit)
    sizes = tuple(len(group) for group in cut)
    if ordered[0] >= LATE * unit and ordered[-1] - ordered[0] <= BUNCHED * ordered[-1]:
        kind = "late"
    elif len(cut) == 1:
        kind = "together"
    elif max(sizes) == 1 or len(cut) >= 0.7 * len(ordered):
        kind = "staircase"
    else:
        kind = "waves"
    return Shape(kind, sizes, ordered[0], ordered[-1], unit)


def _s(seconds: float) -> str:
    return f"{seconds:.2f} s"


def clause(endpoint: str, found: Shape, lanes: int | None) -> str:
    """One endpoint's part of the sentence."""
    n = sum(found.groups)
    if found.kind == "staircase":
        rise = f", the last {found.last_s / found.first_s:.1f}x the first" if found.first_s > 0 else ""
        return (f"{endpoint} answered one at a time, a staircase of {len(found.groups)} steps from "
                f"{_s(found.first_s)} to {_s(found.last_s)}{rise}")  # fmt: skip
    if found.kind == "late":
        alone = f"{found.first_s / found.t_s:.1f}x one request alone (t = {_s(found.t_s)})"
        return (
            f"{endpoint} answered all {n} late, together near the end: even the first after {_s(found.first_s)}, "
            + alone
        )
    if found.kind == "waves":
        sizes = sorted(found.groups)
        size = sizes[len(sizes) // 2]
        why = f" (its {lanes} lanes)" if lanes and size == lanes else ""
        return (f"{endpoint} answered in {len(found.groups)} waves of about {size}{why}, from {_s(found.first_s)} "
                f"to {_s(found.last_s)}")  # fmt: skip
    return f"{endpoint} answered all {n} together, after {_s(found.first_s)}-{_s(found.last_s)} (t = {_s(found.t_s)})"


def sentence(rows: Sequence[Mapping[str, Any]]) -> str:
    """What the table's rows show, one sentence from each row's `responses_s`, `solo_s` and `lanes`."""
    parts = []
    for row in rows:
        found = shape(row.get("responses_s") or [], row.get("solo_s"))
        if found is not None:
            parts.append(clause(str(row.get("group", row["endpoint"])), found, row.get("lanes")))
    if not parts:
        return ""
    return f"What the rows show: {'; '.join(parts)}."
