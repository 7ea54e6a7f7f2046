"""The race's few statistics: a makespan's ratio to its ideal, the median, a nearest-rank percentile."""

from __future__ import annotations

import math
from collections.abc import Sequence


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
