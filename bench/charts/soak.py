"""bench.soak's chart: RSS per process, descriptors and threads per role, and /ping, over the soak; faults marked."""

from __future__ import annotations

import math
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from bench.charts.figures import OKABE_ITO, pyplot, save

# A process key seen in fewer samples than this (a race's helpers, a process caught while starting) is drawn in
# grey, without a legend entry: it would crowd out the lab's own processes.
LASTING = 3
TRANSIENT = "#BBBBBB"


def _style(number: int) -> tuple[str, str]:
    return OKABE_ITO[number % len(OKABE_ITO)], ("-", "--", ":")[number // len(OKABE_ITO) % 3]


def _per_role(doc: Mapping[str, Any], what: str) -> dict[str, list[float]]:
    """Each role's `what` summed over its processes at every sample time (NaN where it had none: a gap)."""
    times = sorted({s["t"] for samples in doc["samples"].values() for s in samples})
    sums: dict[str, dict[float, float]] = {}
    for key, samples in doc["samples"].items():
        role = doc["processes"].get(key, {}).get("role", key)
        for sample in samples:
            at = sums.setdefault(role, {})
            at[sample["t"]] = at.get(sample["t"], 0) + sample[what]
    return {role: [points.get(t, math.nan) for t in times] for role, points in sorted(sums.items())}


def _marks(ax: Any, doc: Mapping[str, Any]) -> None:
    """Each fault as a dashed line, each quiet check as a shaded span."""
    for fault in doc["faults"]:
        ax.axvline(fault["started"], color="black", linestyle="--", linewidth=0.6, alpha=0.6)
    for check in [doc.get("baseline"), *doc.get("checks", [])]:
        if check:
            ax.axvspan(check["at"] - check["waited_s"], check["at"], color="grey", alpha=0.15, linewidth=0)


def _rss(ax: Any, doc: Mapping[str, Any]) -> None:
    lasting = [key for key, samples in sorted(doc["samples"].items()) if len(samples) >= LASTING]
    for key, samples in sorted(doc["samples"].items()):
        colour, style = _style(lasting.index(key)) if key in lasting else (TRANSIENT, ":")
        for turn, pid in enumerate(dict.fromkeys(s["pid"] for s in samples)):  # a replaced process: a new line
            mine = [s for s in samples if s["pid"] == pid]
            label = key if key in lasting and not turn else None
            ax.plot([s["t"] for s in mine], [s["rss_bytes"] / 2**20 for s in mine], style, color=colour, linewidth=1,
                    marker="." if len(mine) == 1 else None, label=label)  # fmt: skip
    ax.set_ylabel("RSS, MiB (each process)")
    ax.legend(fontsize=6, ncol=3, loc="lower right")


def draw(path: Path, doc: Mapping[str, Any]) -> Path:
    plt = pyplot()
    fig, (rss, fds, threads, ping) = plt.subplots(4, 1, figsize=(10, 12), sharex=True, layout="constrained")
    _rss(rss, doc)
    times = sorted({s["t"] for samples in doc["samples"].values() for s in samples})
    for ax, what, label in ((fds, "fds", "open descriptors"), (threads, "threads", "threads")):
        for number, (role, values) in enumerate(_per_role(doc, what).items()):
            colour, style = _style(number)
            ax.step(times, values, style, where="post", color=colour, linewidth=1, label=role)
        ax.set_ylabel(f"{label} (per role)")
        ax.legend(fontsize=6, ncol=4, loc="upper left")
    pings = doc.get("pings", [])
    ping.plot([t for t, _ in pings], [ms for _, ms in pings], ".", markersize=2, color=OKABE_ITO[0], label="/ping")
    ping.set_yscale("log")
    ping.set_ylabel("/ping, ms")
    ping.set_xlabel("seconds since the soak began (dashed: a fault; grey: a quiet check)")
    for ax in (rss, fds, threads, ping):
        _marks(ax, doc)
        ax.grid(True, alpha=0.3)
    return save(fig, path)
