"""Two sides measured in alternating rounds, and their ratio taken round by round (bench.overhead).

A shared host's speed moves from minute to minute, so one side measured
after the other compares two minutes, not two servers. Here every item
(a route at a concurrency, a convoy, an accept policy's batch) is measured
on both sides back to back, the pair's order flipping each round (floor,
lab; then lab, floor) so neither side always has the warmer caches or the
later minute; each round's ratio is taken from its own pair, and the
median of the rounds' ratios is the figure.
"""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable, Hashable, Mapping, Sequence
from typing import Any, TypeVar

T = TypeVar("T")
K = TypeVar("K", bound=Hashable)


def alternate(
    items: Sequence[T],
    sides: tuple[str, str],
    rounds: int,
    measure: Callable[[T, str], dict[str, Any]],
    report: Callable[[dict[str, Any]], None] = lambda row: None,
) -> list[dict[str, Any]]:
    """Every item measured on both sides in every round, the sides' order flipped each round; a row each.

    A row is `measure(item, side)` plus its round, side and when it began
    (`began`, time.time()), in the order measured.
    """
    rows = []
    for number in range(1, rounds + 1):
        for item in items:
            for side in sides if number % 2 else sides[::-1]:
                began = time.time()
                rows.append({"round": number, "side": side, "began": began, **measure(item, side)})
                report(rows[-1])
    return rows


def ratios(
    rows: Sequence[Mapping[str, Any]], key: str, over: tuple[str, str], group: Callable[[Mapping[str, Any]], K]
) -> dict[K, dict[str, Any]]:
    """Per group: `key` of side over[0] divided by `key` of side over[1], round by round, and their median.

    A round missing either side, or whose value is missing or 0 below, has no ratio.
    """
    values: dict[K, dict[int, dict[str, float]]] = {}
    for row in rows:
        if row.get(key) is not None:
            values.setdefault(group(row), {}).setdefault(int(row["round"]), {})[str(row["side"])] = float(row[key])
    found: dict[K, dict[str, Any]] = {}
    top, bottom = over
    for name, by_round in values.items():
        each = [
            round(pair[top] / pair[bottom], 3)
            for _, pair in sorted(by_round.items())
            if top in pair and bottom in pair and pair[bottom] > 0
        ]
        found[name] = {"rounds": each, "median": round(statistics.median(each), 3) if each else None}
    return found
