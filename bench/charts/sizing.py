"""The sizing advisor's chart (bench.size): each swept point's throughput and p95, predicted beside measured."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

from bench.charts.figures import INK, OKABE_ITO, pyplot, save


def _mark(ax: Any, labels: Sequence[str], chosen: str) -> None:
    """The points' labels under the (shared) x axis, the recommendation's in bold."""
    ax.set_xticks(range(len(labels)), labels)
    for tick in ax.get_xticklabels():
        if tick.get_text() == chosen:
            tick.set_fontweight("bold")


def size(path: Path, points: Sequence[dict[str, Any]], chosen: str, title: str) -> Path:
    """Top: throughput under closed load, measured (bars, the rounds' range as a line) and predicted (diamonds).
    Bottom: p95 under closed and open load, measured and predicted. The recommendation's label is bold."""
    plt = pyplot()
    fig, (rate, tail) = plt.subplots(2, 1, figsize=(9, 7), sharex=True, layout="constrained")
    labels = [p["label"] for p in points]
    xs = list(range(len(points)))
    measured = [(p["measured"] or {}).get("closed_rps") or 0 for p in points]
    spans = [(p["measured"] or {}).get("closed_rps_range") or [m, m] for p, m in zip(points, measured, strict=True)]
    rate.bar(xs, measured, color=OKABE_ITO[0], label="measured (median of rounds)")
    rate.vlines(xs, [s[0] for s in spans], [s[1] for s in spans], color=INK, linewidth=1.5, label="rounds' range")
    rate.scatter(xs, [p["predicted"]["closed_rps"] for p in points], marker="D", color=OKABE_ITO[1], zorder=3,
                 label="predicted")  # fmt: skip
    rate.set_ylabel("requests/s, closed load")
    rate.set_title(title, fontsize=10)
    rate.legend(loc="lower right", fontsize=8)
    for key, predicted, label, colour in (("closed_p95_ms", "closed_p95_ms", "closed", OKABE_ITO[2]),
                                          ("open_p95_ms", "open_p95_ms", "open rate", OKABE_ITO[5])):  # fmt: skip
        tail.plot(xs, [(p["measured"] or {}).get(key) for p in points], marker="o", color=colour,
                  label=f"p95 measured, {label}")  # fmt: skip
        tail.plot(xs, [p["predicted"][predicted] for p in points], marker="D", linestyle=":", color=colour,
                  label=f"p95 predicted, {label}")  # fmt: skip
    tail.set_yscale("log")
    tail.set_ylabel("p95 response time, ms")
    tail.set_xlabel("processes x threads (the recommendation in bold)")
    tail.legend(loc="upper right", fontsize=8)
    for ax in (rate, tail):
        ax.grid(True, axis="y", alpha=0.3)
    _mark(tail, labels, chosen)
    return save(fig, path)
