"""The soak's verdict rules, as pure functions of its samples: growth, trend, baseline return, ping, accounting.

Every rule returns a `Check`: what it looked at, whether it held, and the
numbers that say why, in words. docs/bench.md (bench.soak) states the rules;
tests/test_soak_verdict.py runs each on synthetic samples built to pass and
built to fail.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass
from typing import Any

from lab.race.stats import percentile

# A process's RSS may end at most this much above its value at the baseline (percent).
RSS_GROWTH_LIMIT_PCT = 5.0
# A slope whose 95 % interval lies above zero fails once it would grow a process by more than this per hour.
TREND_LIMIT_PCT_PER_HOUR = 1.0
# Fewer samples than this cannot make a slope worth an interval: the trend is not judged.
MIN_TREND_SAMPLES = 8
# /ping's p99 over the last half may be at most this many times the first half's: the host's own speed moves
# about 2x from minute to minute (docs/results.md), so a tighter bound would judge the host, not the lab.
PING_STEADY_FACTOR = 2.0
# ... plus this many milliseconds, so that a p99 of 2 ms becoming 5 ms (scheduling noise) is not a failure.
PING_STEADY_SLACK_MS = 10.0
_Z_975 = 1.959963984540054


@dataclass(frozen=True)
class Check:
    """One rule applied to one subject (a process, a role, a fault, the whole run)."""

    rule: str
    subject: str
    ok: bool
    detail: str
    numbers: dict[str, Any]

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


def t_975(df: int) -> float:
    """Student's t, two-sided 95 % (the 0.975 quantile) for `df` degrees of freedom.

    The Cornish-Fisher expansion around the normal quantile: within 0.004 of
    the tables at df = 3 and 0.001 from df = 4 up (2.571 at 5, 2.228 at 10, 2.042 at 30).
    """
    if df < 1:
        raise ValueError("a t quantile needs at least one degree of freedom")
    if df <= 2:
        return (12.706, 4.303)[df - 1]
    z = _Z_975
    g1 = (z**3 + z) / 4
    g2 = (5 * z**5 + 16 * z**3 + 3 * z) / 96
    g3 = (3 * z**7 + 19 * z**5 + 17 * z**3 - 15 * z) / 384
    g4 = (79 * z**9 + 776 * z**7 + 1482 * z**5 - 1920 * z**3 - 945 * z) / 92160
    return z + g1 / df + g2 / df**2 + g3 / df**3 + g4 / df**4


@dataclass(frozen=True)
class Trend:
    """A least-squares slope (value per second) with its 95 % confidence interval, over `samples` points."""

    slope: float
    low: float
    high: float
    samples: int

    def per_hour_pct(self, base: float) -> tuple[float, float, float]:
        """The slope and its interval as percent of `base` per hour."""
        scale = 3600 * 100 / base if base else 0.0
        return self.slope * scale, self.low * scale, self.high * scale


def trend(times: Sequence[float], values: Sequence[float]) -> Trend | None:
    """The slope of `values` against `times` and its 95 % interval; None with fewer than MIN_TREND_SAMPLES."""
    n = len(times)
    if n < MIN_TREND_SAMPLES or n != len(values):
        return None
    mean_t, mean_v = sum(times) / n, sum(values) / n
    sxx = sum((t - mean_t) ** 2 for t in times)
    if sxx == 0:
        return None
    slope = sum((t - mean_t) * (v - mean_v) for t, v in zip(times, values, strict=True)) / sxx
    residual = sum((v - mean_v - slope * (t - mean_t)) ** 2 for t, v in zip(times, values, strict=True))
    error = math.sqrt(residual / (n - 2) / sxx)
    margin = t_975(n - 2) * error
    return Trend(slope, slope - margin, slope + margin, n)


def growth_check(subject: str, baseline: float, readings: Sequence[tuple[str, float]],
                 limit_pct: float = RSS_GROWTH_LIMIT_PCT) -> Check:  # fmt: skip
    """RSS at every later reading (label, bytes) at most `limit_pct` above `baseline`; the worst one named."""
    if not readings or baseline <= 0:
        return Check("rss growth", subject, True, "no reading after the baseline", {"baseline_bytes": baseline})
    label, worst = max(readings, key=lambda reading: reading[1])
    growth = 100 * (worst / baseline - 1)
    final = readings[-1][1]
    numbers = {"baseline_bytes": baseline, "final_bytes": final, "max_bytes": worst, "max_growth_pct": round(growth, 2),
               "final_growth_pct": round(100 * (final / baseline - 1), 2)}  # fmt: skip
    ok = growth <= limit_pct
    words = (f"{_mb(baseline)} at the baseline, {_mb(final)} at the end; at most {growth:+.1f} % ({label}), "
             f"{'within' if ok else 'over'} the {limit_pct:g} % allowed")  # fmt: skip
    return Check("rss growth", subject, ok, words, numbers)


def trend_check(subject: str, base: float, found: Trend | None,
                limit_pct_per_hour: float = TREND_LIMIT_PCT_PER_HOUR) -> Check:  # fmt: skip
    """No upward trend: fails when the slope's whole 95 % interval is above zero and the slope itself is over
    the limit; "unclear" (not a failure) when the interval holds zero but reaches past the limit."""
    if found is None:
        return Check("rss trend", subject, True, f"too few samples for a trend (fewer than {MIN_TREND_SAMPLES})",
                     {"status": "too few samples"})  # fmt: skip
    slope, low, high = found.per_hour_pct(base)
    if low > 0 and slope > limit_pct_per_hour:
        status = "rising"
    elif high > limit_pct_per_hour and low <= 0:
        status = "unclear"
    else:
        status = "flat"
    numbers = {"status": status, "slope_pct_per_hour": round(slope, 3), "low_pct_per_hour": round(low, 3),
               "high_pct_per_hour": round(high, 3), "samples": found.samples}  # fmt: skip
    words = f"{slope:+.2f} %/h (95 % interval {low:+.2f} to {high:+.2f}) over {found.samples} samples: {status}"
    if status == "unclear":
        words += f"; a rise past {limit_pct_per_hour:g} %/h cannot be ruled out: soak longer"
    return Check("rss trend", subject, status != "rising", words, numbers)


Counts = Mapping[str, Mapping[str, int]]  # role -> {"processes": n, "fds": n, "threads": n}


def count_differences(baseline: Counts, observed: Counts) -> list[str]:
    """Every role whose processes, descriptors or threads differ from the baseline, in words; [] when equal."""
    found = []
    for role in sorted(set(baseline) | set(observed)):
        was, now = baseline.get(role, {}), observed.get(role, {})
        for what in ("processes", "fds", "threads"):
            if was.get(what, 0) != now.get(what, 0):
                found.append(f"{role}: {what} {was.get(what, 0)} -> {now.get(what, 0)}")
    return found


def baseline_check(subject: str, baseline: Counts, observed: Counts, waited_s: float) -> Check:
    """Processes, descriptors and threads per role back to exactly the baseline's (`observed`: the last poll)."""
    differences = count_differences(baseline, observed)
    ok = not differences
    words = (f"every role back to its baseline after {waited_s:.1f} s" if ok
             else f"not back to the baseline after {waited_s:.1f} s: " + "; ".join(differences))  # fmt: skip
    return Check("baseline return", subject, ok, words, {"waited_s": round(waited_s, 2), "differences": differences})


def orphan_check(subject: str, orphans: Sequence[str]) -> Check:
    """No process that was once the lab's still alive outside its tree (a child that outlived its parent)."""
    words = "no process outlived its place in the lab" if not orphans else (
        f"{len(orphans)} outlived their place in the lab: " + "; ".join(orphans))  # fmt: skip
    return Check("no orphans", subject, not orphans, words, {"orphans": list(orphans)})


def ping_check(first: Sequence[float], last: Sequence[float], factor: float = PING_STEADY_FACTOR,
               slack_ms: float = PING_STEADY_SLACK_MS) -> Check:  # fmt: skip
    """/ping's p99 over the last half at most `factor` x the first half's plus `slack_ms` (milliseconds)."""
    before, after = percentile(first, 0.99), percentile(last, 0.99)
    if before is None or after is None:
        return Check("ping steady", "/ping", True, "too few pings to compare the halves", {})
    bound = factor * before + slack_ms
    ok = after <= bound
    words = (f"p99 {before:.1f} ms over the first half ({len(first)} pings), {after:.1f} ms over the last "
             f"({len(last)}); {'within' if ok else 'over'} {factor:g}x + {slack_ms:g} ms = {bound:.1f} ms")  # fmt: skip
    numbers = {"first_p99_ms": before, "last_p99_ms": after, "bound_ms": round(bound, 3)}
    return Check("ping steady", "/ping", ok, words, numbers)


def accounting_check(tally: Mapping[str, int]) -> Check:
    """sent = answered + counted errors, and nothing unaccounted for (no answer and no fault to explain it)."""
    sent, answered, errors, lost = (tally[k] for k in ("sent", "answered", "counted_errors", "unaccounted"))
    ok = lost == 0 and sent == answered + errors
    words = f"sent {sent:,} = answered {answered:,} + counted errors {errors:,}" + (
        "" if ok else f"; {lost:,} unaccounted for (no answer and no fault that explains it)"
    )
    return Check("accounting", "every request", ok, words, dict(tally))


def unexpected_check(unexpected: Mapping[str, int]) -> Check:
    """No answer with an error status that no fault was designed to cause (by status: {"500": 2})."""
    total = sum(unexpected.values())
    fives = sum(count for status, count in unexpected.items() if status.startswith("5"))
    listed = ", ".join(f"{count} x {status}" for status, count in sorted(unexpected.items()))
    words = f"{total} unexpected: {listed}" if total else "no unexpected error status"
    return Check("unexpected errors", "every answer", total == 0, words, {"by_status": dict(unexpected),
                                                                          "unexpected_5xx": fives})  # fmt: skip


def _mb(value: float) -> str:
    return f"{value / 2**20:.1f} MiB"
