"""Charts for the load tools: a Locust run over time (bench.load), several side by side (bench.seed), the knee
(bench.knee). Matplotlib and the palette of bench/charts/figures.py."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

from bench.charts.figures import OKABE_ITO, pyplot, save


def timeline(path: Path, seed: Sequence[dict[str, Any]], host: Sequence[dict[str, Any]]) -> Path:
    """bench.load over time: throughput and failures, latency (median, 95th percentile), users; the host's CPU."""
    plt = pyplot()
    fig, (rate, latency, cpu) = plt.subplots(3, 1, figsize=(9, 8), sharex=True, layout="constrained")
    seconds = [r["t_s"] for r in seed]
    rate.plot(seconds, [r["req_s"] or 0 for r in seed], marker="o", color=OKABE_ITO[0], label="requests/s")
    rate.plot(seconds, [r["fails"] for r in seed], marker="x", color=OKABE_ITO[5], label="failures (total)")
    users = rate.twinx()
    users.step(seconds, [r["users"] for r in seed], where="post", color="grey", linewidth=0.8, label="users")
    users.set_ylabel("users")
    rate.set_ylabel("requests/s")
    rate.legend(loc="upper left", fontsize=8)
    for key, label, colour in (("median_ms", "median", OKABE_ITO[1]), ("p95_ms", "95th percentile", OKABE_ITO[2])):
        latency.plot(seconds, [r[key] for r in seed], marker="o", color=colour, label=label)
    latency.set_ylabel("response time, ms")
    latency.legend(loc="upper left", fontsize=8)
    moments = [r["t_s"] for r in host]
    for key, label, colour in (("user_pct", "user", OKABE_ITO[0]), ("system_pct", "system", OKABE_ITO[3]),
                               ("steal_pct", "steal", OKABE_ITO[5])):  # fmt: skip
        cpu.plot(moments, [r[key] for r in host], color=colour, label=f"CPU {label} %")
    queue = cpu.twinx()
    queue.plot(moments, [r["run_queue"] for r in host], color="grey", linestyle="--", label="run queue")
    queue.set_ylabel("runnable threads")
    cpu.set_ylabel("% of all cores")
    cpu.set_xlabel("seconds since the first user started")
    cpu.legend(loc="upper left", fontsize=8)
    for ax in (rate, latency, cpu):
        ax.grid(True, alpha=0.3)
    return save(fig, path)


def seed(path: Path, runs: Sequence[dict[str, Any]]) -> Path:
    """bench.seed: each target's throughput, median latency and idle CPU over time, one line per target."""
    plt = pyplot()
    fig, (rate, latency, idle) = plt.subplots(3, 1, figsize=(9, 8), sharex=True, layout="constrained")
    for number, run in enumerate(runs):
        colour, label = OKABE_ITO[number % len(OKABE_ITO)], run["label"]
        seconds = [r["t_s"] for r in run["locust"]]
        rate.plot(seconds, [r["req_s"] or 0 for r in run["locust"]], marker="o", color=colour, label=label)
        latency.plot(seconds, [r["median_ms"] for r in run["locust"]], marker="o", color=colour, label=label)
        idle.plot([r["t_s"] for r in run["host"]], [r["idle_pct"] for r in run["host"]], color=colour, label=label)
    rate.set_ylabel("requests/s")
    latency.set_ylabel("median response time, ms")
    idle.set_ylabel("CPU idle, % of all cores")
    idle.set_xlabel("seconds since the first user started")
    for ax in (rate, latency, idle):
        ax.grid(True, alpha=0.3)
        ax.legend(loc="upper right", fontsize=8)
    return save(fig, path)


def knee(path: Path, rows: Sequence[dict[str, Any]], predicted: dict[str, float]) -> Path:
    """bench.knee: per mode, latency (median, 95th percentile) and what was served against the offered rate;
    the predicted capacity as a vertical line."""
    plt = pyplot()
    modes = list(dict.fromkeys(r["mode"] for r in rows))
    fig, axes = plt.subplots(2, len(modes), figsize=(6 * len(modes), 7), squeeze=False, layout="constrained")
    for column, mode in enumerate(modes):
        latency, served = axes[0][column], axes[1][column]
        bounds = list(dict.fromkeys(r["bound"] for r in rows if r["mode"] == mode))
        for number, bound in enumerate(bounds):
            mine = [r for r in rows if r["mode"] == mode and r["bound"] == bound]
            offered, colour = [r["offered_rps"] for r in mine], OKABE_ITO[number % len(OKABE_ITO)]
            latency.plot(offered, [r["p50_ms"] for r in mine], marker="o", color=colour, label=f"{bound}: median")
            latency.plot(offered, [r["p95_ms"] for r in mine], marker="^", linestyle="--", color=colour,
                         label=f"{bound}: 95th percentile")  # fmt: skip
            served.plot(offered, [r["ok_rps"] for r in mine], marker="o", color=colour, label=f"{bound}: answered")
            served.plot(offered, [r["rejected_rps"] for r in mine], marker="x", linestyle=":", color=colour,
                        label=f"{bound}: 503/s")  # fmt: skip
        top = max(r["offered_rps"] for r in rows if r["mode"] == mode)
        served.plot([0, top], [0, top], color="grey", linewidth=0.8, label="offered")
        for ax in (latency, served):
            ax.axvline(predicted[mode], color="black", linestyle="-.", linewidth=0.9, label="predicted capacity")
            ax.grid(True, alpha=0.3)
            ax.legend(fontsize=7)
        latency.set_yscale("log")
        latency.set_title(f"/{mode}")
        latency.set_ylabel("response time of answered requests, ms")
        served.set_ylabel("requests/s")
        served.set_xlabel("offered requests/s (evenly spaced arrivals)")
    return save(fig, path)
