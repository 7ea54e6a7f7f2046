"""PNG charts for the bench: a race's timeline and a sweep's heatmaps (matplotlib, Agg, loaded lazily).

Colours come from the Okabe-Ito palette, which stays distinguishable with
the common colour-vision deficiencies; queue wait and run time also differ
by hatching and fill, and the heatmaps use viridis, so nothing relies on
telling red from green.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from bench.lib.optional import need_module
from bench.lib.tables import spread_text

# Okabe & Ito (2008), "Color Universal Design"; black is kept for lines and text.
OKABE_ITO = ("#0072B2", "#E69F00", "#009E73", "#CC79A7", "#56B4E9", "#D55E00", "#F0E442")
INK = "#000000"
FAILED = "#999999"


def pyplot() -> Any:
    # Imported on first use: matplotlib takes a second to load, and only charts need it. (None for 3.13t.)
    install = "pip install matplotlib (none builds on free-threaded 3.13t: bench.race --no-files draws nothing)"
    matplotlib = need_module("matplotlib", "matplotlib", install, tool="a bench chart")

    matplotlib.use("Agg")  # no display needed; must precede pyplot's import
    import matplotlib.pyplot as plt  # noqa: PLC0415

    return plt


def save(fig: Any, path: Path) -> Path:
    """Every chart's end: the figure as a PNG at `path`, and its memory given back."""
    fig.savefig(path, dpi=110)
    pyplot().close(fig)
    return path


def _worker_key(response: dict[str, Any]) -> str:
    body = response.get("body")
    if response.get("status") != 200 or not isinstance(body, dict) or "worker" not in body:
        return "failed"
    worker = body["worker"]
    return f"pid {worker['pid']} · {worker['thread']}"


def _lanes(responses: Sequence[dict[str, Any]]) -> list[tuple[str, list[dict[str, Any]]]]:
    """Responses grouped by the worker (pid, thread) that ran them, in order of first start."""
    groups: dict[str, list[dict[str, Any]]] = {}
    for response in responses:
        groups.setdefault(_worker_key(response), []).append(response)

    def start(r: dict[str, Any]) -> float:
        body = r.get("body")
        timing = body.get("timing") if isinstance(body, dict) else None
        return float(timing["started"]) if timing else float(r["sent"])

    ordered = [(key, sorted(rows, key=start)) for key, rows in groups.items()]
    return sorted(ordered, key=lambda group: (group[0] == "failed", start(group[1][0])))


def _draw_requests(ax: Any, responses: Sequence[dict[str, Any]], t0: float) -> list[tuple[float, str]]:
    """One row per request: client wait as a thin line, queue hatched, run solid; lane label positions."""
    labels: list[tuple[float, str]] = []
    y = 0
    for lane, (key, rows) in enumerate(_lanes(responses)):
        colour = FAILED if key == "failed" else OKABE_ITO[lane % len(OKABE_ITO)]
        first = y
        for response in rows:
            ax.hlines(y, response["sent"] - t0, response["received"] - t0, colors=INK, linewidth=0.8, alpha=0.6)
            body = response.get("body")
            timing = body.get("timing") if isinstance(body, dict) else None
            if timing:
                received, started, finished = (timing[k] - t0 for k in ("received", "started", "finished"))
                ax.barh(
                    y,
                    started - received,
                    left=received,
                    height=0.7,
                    color=colour,
                    alpha=0.3,
                    hatch="///",
                    edgecolor=colour,
                    linewidth=0,
                )
                ax.barh(y, finished - started, left=started, height=0.7, color=colour, edgecolor=INK, linewidth=0.6)
            else:
                ax.barh(
                    y,
                    response["received"] - response["sent"],
                    left=response["sent"] - t0,
                    height=0.7,
                    color=FAILED,
                    hatch="xx",
                    edgecolor=INK,
                    linewidth=0.6,
                )
            ax.text(response["received"] - t0, y, f" #{response['index']}", va="center", fontsize=7)
            y += 1
        labels.append(((first + y - 1) / 2, key))
        if y < len(responses):
            ax.axhline(y - 0.5, color=INK, linewidth=0.4, alpha=0.3)
    return labels


def _mark(ax: Any, x: float, text: str | None, style: str, *, top: bool = True) -> None:
    """A vertical line at `x`, labelled at the top or the bottom of the axes (so two close lines stay legible)."""
    ax.axvline(x, color=INK, linestyle=style, linewidth=1.2)
    if text:
        ax.annotate(
            text,
            (x, 1.0 if top else 0.0),
            xycoords=("data", "axes fraction"),
            xytext=(3, -12 if top else 4),
            textcoords="offset points",
            fontsize=8,
            ha="left",
            bbox={"facecolor": "white", "edgecolor": "none", "alpha": 0.8, "pad": 1},
        )


def _draw_pings(ax: Any, pings: Sequence[dict[str, Any]], t0: float) -> None:
    ok = [p for p in pings if p["status"] == 200]
    bad = [p for p in pings if p["status"] != 200]
    if ok:
        ax.plot(
            [p["sent"] - t0 for p in ok],
            [max(p["ms"], 0.01) for p in ok],
            color=OKABE_ITO[0],
            marker=".",
            markersize=3,
            linewidth=0.8,
            label="/ping latency",
        )
        if max(p["ms"] for p in ok) / max(min(p["ms"] for p in ok), 0.01) > 50:
            ax.set_yscale("log")  # a blocked loop's seconds next to idle milliseconds
    if bad:
        ax.plot(
            [p["sent"] - t0 for p in bad],
            [max(p["ms"], 0.01) for p in bad],
            linestyle="none",
            marker="x",
            color=OKABE_ITO[5],
            label="/ping failed",
        )
    ax.set_ylabel("/ping latency, ms")
    ax.grid(True, axis="both", alpha=0.3)
    if bad:
        ax.legend(loc="best", fontsize=8)


def timeline(
    path: Path, summary: dict[str, Any], responses: Sequence[dict[str, Any]], pings: Sequence[dict[str, Any]]
) -> Path:
    """One race as a PNG: request bars by worker over the ping probe's latency; returns `path`."""
    plt = pyplot()
    from matplotlib.patches import Patch  # noqa: PLC0415

    t0 = min(r["sent"] for r in responses)
    rows = len(responses)
    fig, (bars, probe) = plt.subplots(
        2,
        1,
        sharex=True,
        figsize=(11, 2.6 + 0.28 * rows + 2.2),
        gridspec_kw={"height_ratios": [max(rows, 4) * 0.28 + 1, 2.2]},
        layout="constrained",
    )
    labels = _draw_requests(bars, responses, t0)
    bars.set_yticks([y for y, _ in labels], [text for _, text in labels], fontsize=8)
    bars.set_ylim(rows - 0.5, -0.5)
    bars.set_ylabel("requests, by worker")
    bars.grid(True, axis="x", alpha=0.3)
    _mark(bars, summary["ideal_s"], f"ideal {summary['ideal_s']:.2f} s", "--", top=True)
    _mark(bars, summary["elapsed_s"], f"elapsed {summary['elapsed_s']:.2f} s", ":", top=False)
    _mark(probe, summary["ideal_s"], None, "--")
    _mark(probe, summary["elapsed_s"], None, ":")
    bars.legend(
        handles=[
            Patch(facecolor="#cccccc", hatch="///", alpha=0.6, label="queued: received → started"),
            Patch(facecolor="#777777", edgecolor=INK, label="running: started → finished"),
            plt.Line2D([], [], color=INK, linewidth=0.8, label="client: sent → received"),
        ],
        loc="lower left",
        bbox_to_anchor=(0.0, 1.0),
        ncol=3,
        frameon=False,
        fontsize=8,
    )
    _draw_pings(probe, pings, t0)
    probe.set_xlabel("seconds since the requests were sent")
    params = ", ".join(f"{k}={v}" for k, v in summary.get("params", {}).items())
    fig.suptitle(
        f"{summary['mode']} · {summary['workload']}{f' ({params})' if params else ''} · "
        f"{summary['concurrency']} concurrent · {summary['cores']} cores · {summary['processes']} server process(es)\n"
        f"elapsed {summary['elapsed_s']:.2f} s, ideal {summary['ideal_s']:.2f} s, ratio {summary['ratio']:.2f}; "
        f"ping p50 {_ms(summary.get('ping_p50_ms'))}, max {_ms(summary.get('ping_max_ms'))}",
        fontsize=10,
    )
    return save(fig, path)


def _ms(value: float | None) -> str:
    return "-" if value is None else f"{value:.1f} ms"


def heatmaps(
    path: Path,
    points: Sequence[dict[str, Any]],
    *,
    row_key: str,
    col_key: str,
    panels: Sequence[tuple[str, str, bool, str]],
    best: dict[str, Any] | None,
    title: str,
    labels: dict[str, str] | None = None,
) -> Path:
    """One heatmap per (key, label, higher_is_better, number format) panel over a row x col grid; returns `path`."""
    plt = pyplot()
    from matplotlib.patches import Rectangle  # noqa: PLC0415

    labels = labels or {}
    rows = sorted({p[row_key] for p in points})
    cols = sorted({p[col_key] for p in points})
    fig, axes = plt.subplots(
        1, len(panels), figsize=(4.2 * len(panels), 1.2 + 0.9 * len(rows) + 1.2), squeeze=False, layout="constrained"
    )
    for ax, (key, label, higher_is_better, fmt) in zip(axes[0], panels, strict=True):
        grid = [[math.nan] * len(cols) for _ in rows]
        for p in points:
            grid[rows.index(p[row_key])][cols.index(p[col_key])] = float(p[key]) if p[key] is not None else math.nan
        # Bright always means better, whichever way the quantity runs.
        image = ax.imshow(grid, cmap="viridis" if higher_is_better else "viridis_r", aspect="auto")
        fig.colorbar(image, ax=ax, fraction=0.046, pad=0.04)
        finite = [v for line in grid for v in line if not math.isnan(v)]
        middle = (min(finite) + max(finite)) / 2 if finite else 0.0
        for i, line in enumerate(grid):
            for j, value in enumerate(line):
                dark = (value < middle) if higher_is_better else (value > middle)
                ax.text(
                    j,
                    i,
                    "-" if math.isnan(value) else format(value, fmt),
                    ha="center",
                    va="center",
                    color="white" if dark else INK,
                    fontsize=9,
                )
        if best is not None:
            i, j = rows.index(best[row_key]), cols.index(best[col_key])
            ax.add_patch(Rectangle((j - 0.5, i - 0.5), 1, 1, fill=False, edgecolor=OKABE_ITO[5], linewidth=3))
        ax.set_xticks(range(len(cols)), [str(c) for c in cols])
        ax.set_yticks(range(len(rows)), [str(r) for r in rows])
        ax.set_xlabel(labels.get(col_key, col_key))
        ax.set_ylabel(labels.get(row_key, row_key))
        ax.set_title(label, fontsize=10)
    fig.suptitle(title, fontsize=10)
    return save(fig, path)


def scale(path: Path, points: Sequence[dict[str, Any]]) -> Path:
    """bench.scale's two panels against concurrency (log axes): makespan with its ideal, and memory per request."""
    plt = pyplot()
    fig, (times, memory) = plt.subplots(1, 2, figsize=(11, 4.4), layout="constrained")
    markers = "osD^v<>"
    for number, name in enumerate(dict.fromkeys(p["series"] for p in points)):
        rows = sorted((p for p in points if p["series"] == name), key=lambda p: p["concurrency"])
        colour, marker = OKABE_ITO[number % len(OKABE_ITO)], markers[number % len(markers)]
        levels = [p["concurrency"] for p in rows]
        times.plot(levels, [p["elapsed_s"] for p in rows], marker=marker, color=colour, label=name)
        times.plot(levels, [p["ideal_s"] for p in rows], linestyle="--", color=colour, linewidth=0.8)
        memory.plot(levels, [max(p["kb_per_request"], 0.1) for p in rows], marker=marker, color=colour, label=name)
    for ax in (times, memory):
        ax.set_xscale("log")
        ax.set_yscale("log")
        ax.set_xlabel("concurrent requests")
        ax.grid(True, which="both", alpha=0.3)
        ax.legend(fontsize=8)
    seconds = points[0]["seconds"] if points else 0
    times.set_ylabel("makespan, s (dashed: ideal)")
    times.set_title(f"every request waits {seconds:g} s", fontsize=10)
    memory.set_ylabel("memory per waiting request, KB")
    memory.set_title("server tree's peak RSS above its idle RSS, per request", fontsize=10)
    return save(fig, path)


def compare(path: Path, rows: Sequence[dict[str, Any]]) -> Path:
    """bench.compare's rows as bars: makespan against the ideal, and the worst /ping wait, one colour per server."""
    plt = pyplot()
    from matplotlib.patches import Patch  # noqa: PLC0415

    servers = list(dict.fromkeys(r["server"] for r in rows))
    colours = {server: OKABE_ITO[i % len(OKABE_ITO)] for i, server in enumerate(servers)}
    labels = [f"{r['server']} {r['config']} · {r['workload']} ×{r['concurrency']}" for r in rows]
    fig, (ratio, ping) = plt.subplots(
        1, 2, figsize=(12, 1.2 + 0.34 * len(rows)), sharey=True, layout="constrained", gridspec_kw={"wspace": 0.02}
    )
    places = list(range(len(rows)))
    fills = [colours[r["server"]] for r in rows]
    ratio.barh(places, [r["ratio"] for r in rows], color=fills, edgecolor=INK, linewidth=0.5)
    ratio.axvline(1.0, color=INK, linestyle="--", linewidth=1)
    for place, row in zip(places, rows, strict=True):
        ratio.text(row["ratio"], place, f" {row['elapsed_s']:.2f} s · {spread_text(row['spread'])}", va="center",
                   fontsize=7)  # fmt: skip
    ratio.set_yticks(places, labels, fontsize=8)
    ratio.invert_yaxis()
    ratio.set_xlabel("makespan / ideal (1 = the best this server's model allows)")
    ratio.grid(True, axis="x", alpha=0.3)
    worst = [max(r["ping_max_ms"] or 0.1, 0.1) for r in rows]
    ping.barh(places, worst, color=fills, edgecolor=INK, linewidth=0.5, hatch="//", alpha=0.8)
    ping.set_xscale("log")
    ping.axvline(100, color=INK, linestyle=":", linewidth=1)
    ping.set_xlabel("worst /ping wait during the burst, ms (dotted: a person notices)")
    ping.grid(True, axis="x", which="both", alpha=0.3)
    ratio.legend(handles=[Patch(facecolor=colours[s], edgecolor=INK, label=s) for s in servers], loc="lower right",
                 fontsize=8)  # fmt: skip
    return save(fig, path)
