"""bench.soak's chart: RSS per process, descriptors and threads per role, and /ping, over the soak; faults marked."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

from bench.charts.figures import OKABE_ITO, pyplot, save


def _per_role(doc: Mapping[str, Any], what: str) -> dict[str, list[tuple[float, int]]]:
    """(t, sum over the role's processes) for each role, from the per-process samples."""
    sums: dict[str, dict[float, int]] = {}
    for key, samples in doc["samples"].items():
        role = doc["processes"].get(key, {}).get("role", key)
        for sample in samples:
            at = sums.setdefault(role, {})
            at[sample["t"]] = at.get(sample["t"], 0) + sample[what]
    return {role: sorted(points.items()) for role, points in sorted(sums.items())}


def _marks(ax: Any, doc: Mapping[str, Any]) -> None:
    """Each fault as a dashed line, each quiet check as a shaded span."""
    for fault in doc["faults"]:
        ax.axvline(fault["started"], color="black", linestyle="--", linewidth=0.6, alpha=0.6)
    for check in [doc.get("baseline"), *doc.get("checks", [])]:
        if check:
            ax.axvspan(check["at"] - check["waited_s"], check["at"], color="grey", alpha=0.15, linewidth=0)


def draw(path: Path, doc: Mapping[str, Any]) -> Path:
    plt = pyplot()
    fig, (rss, fds, threads, ping) = plt.subplots(4, 1, figsize=(10, 12), sharex=True, layout="constrained")
    for number, (key, samples) in enumerate(sorted(doc["samples"].items())):
        colour = OKABE_ITO[number % len(OKABE_ITO)]
        style = ("-", "--", ":")[number // len(OKABE_ITO) % 3]
        for turn, pid in enumerate(dict.fromkeys(s["pid"] for s in samples)):  # a replaced process: a new line
            mine = [s for s in samples if s["pid"] == pid]
            rss.plot([s["t"] for s in mine], [s["rss_bytes"] / 2**20 for s in mine], style, color=colour,
                     linewidth=1, marker="." if len(mine) == 1 else None, label=None if turn else key)  # fmt: skip
    rss.set_ylabel("RSS, MB (each process)")
    rss.legend(fontsize=6, ncol=3, loc="upper left")
    for ax, what, label in ((fds, "fds", "open descriptors"), (threads, "threads", "threads")):
        for number, (role, points) in enumerate(_per_role(doc, what).items()):
            colour = OKABE_ITO[number % len(OKABE_ITO)]
            style = ("-", "--", ":")[number // len(OKABE_ITO) % 3]
            ax.step([t for t, _ in points], [n for _, n in points], style, where="post", color=colour, linewidth=1,
                    label=role)  # fmt: skip
        ax.set_ylabel(f"{label} (per role)")
        ax.legend(fontsize=6, ncol=3, loc="upper left")
    pings = doc.get("pings", [])
    ping.plot([t for t, _ in pings], [ms for _, ms in pings], ".", markersize=2, color=OKABE_ITO[0], label="/ping")
    ping.set_yscale("log")
    ping.set_ylabel("/ping, ms")
    ping.set_xlabel("seconds since the soak began (dashed: a fault; grey: a quiet check)")
    for ax in (rss, fds, threads, ping):
        _marks(ax, doc)
        ax.grid(True, alpha=0.3)
    return save(fig, path)
