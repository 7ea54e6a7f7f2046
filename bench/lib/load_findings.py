"""Findings of the load tools (bench.seed, bench.knee): sentences written from the measured rows, with the numbers
taken from them; no sentence the rows do not bear out (as bench/lib/findings.py does for bench.compare)."""

from __future__ import annotations

import statistics
from collections.abc import Sequence
from typing import Any

IDLE_PCT = 30.0  # a host this idle while requests wait leaves a core unused (2 cores: one is 50 %)
KNEE = 2.0  # the knee: the first step whose median answer takes this many times the lowest step's


def _mean(values: Sequence[float | int | None]) -> float | None:
    known = [float(v) for v in values if v is not None]
    return round(statistics.fmean(known), 1) if known else None


def summary_row(doc: dict[str, Any]) -> dict[str, Any]:
    """One run of bench.load's measure() in a row: its totals, overall req/s, the host's means over the run."""
    last, host = doc["totals"], doc["host"]
    seconds = doc["locust"][-1]["t_s"] if doc["locust"] else 0
    return {
        "seconds": seconds, "reqs": last.get("reqs", 0), "fails": last.get("fails", 0),
        "avg_ms": last.get("avg_ms"), "min_ms": last.get("min_ms"), "median_ms": last.get("median_ms"),
        "p95_ms": last.get("p95_ms"), "req_s": round(last.get("reqs", 0) / seconds, 2) if seconds else None,
        **{key: _mean([h[key] for h in host]) for key in ("run_queue", "user_pct", "idle_pct", "pool_running",
                                                          "pool_waiting")},
    }  # fmt: skip


def _median_runs(runs: Sequence[dict[str, Any]]) -> list[dict[str, Any]]:
    """Per target, its median round by the run's length."""
    groups: dict[str, list[dict[str, Any]]] = {}
    for run in runs:
        groups.setdefault(run["label"], []).append(run)
    return [sorted(g, key=lambda r: r["summary"]["seconds"])[(len(g) - 1) // 2] for g in groups.values()]


def _ms(value: float) -> str:
    return f"{value:.0f} ms" if value < 1000 else f"{value / 1000:.1f} s"


def seed_findings(runs: Sequence[dict[str, Any]], *, users: int) -> list[str]:
    """What the seed's runs show: which target served the users fastest, Little's law, idle cores, the queue."""
    rows = [r for r in _median_runs(runs) if r["summary"]["req_s"]]
    if not rows:
        return []
    rows.sort(key=lambda r: -r["summary"]["req_s"])
    best, found = rows[0], []
    b = best["summary"]
    for other in rows[1:]:
        o = other["summary"]
        found.append(
            f"{best['label']} answered {b['reqs']} requests in {b['seconds']} s ({b['req_s']:g} req/s, median "
            f"{_ms(b['median_ms'])}); {other['label']} took {o['seconds']} s ({o['req_s']:g} req/s, median "
            f"{_ms(o['median_ms'])}): {b['req_s'] / o['req_s']:.2f}x the throughput."
        )
    for run in rows:
        s = run["summary"]
        if s["avg_ms"] and s["req_s"] and abs(s["req_s"] * s["avg_ms"] / 1000 - users) <= 0.2 * users:
            found.append(
                f"{run['label']}: {s['req_s']:g} req/s x {s['avg_ms'] / 1000:.2f} s on average = "
                f"{s['req_s'] * s['avg_ms'] / 1000:.1f} requests in the server, the {users} users (Little's law): "
                "each user always had one there, so a request's time is the queue ahead of it over the throughput."
            )
        if (s["idle_pct"] or 0) >= IDLE_PCT and (s["pool_waiting"] or 0) >= 1:
            found.append(
                f"{run['label']}: the host was {s['idle_pct']:g} % idle while {s['pool_waiting']:g} requests waited "
                f"on average: a core stayed unused with work queued"
                + (" (the GIL lets one thread compute at a time)." if run["label"] == "/threading" else ".")
            )
        if s["min_ms"] and s["median_ms"] and s["median_ms"] >= 2 * s["min_ms"]:
            found.append(
                f"{run['label']}: the fastest answer took {_ms(s['min_ms'])} and the median {_ms(s['median_ms'])}: "
                f"{100 * (1 - s['min_ms'] / s['median_ms']):.0f} % of the median request's time was waiting its turn."
            )
    return found


def knee_step(rows: Sequence[dict[str, Any]]) -> dict[str, Any] | None:
    """The first step (lowest offered rate first) whose median answer takes KNEE x the lowest step's."""
    ordered = sorted((r for r in rows if r["p50_ms"] is not None), key=lambda r: r["offered_rps"])
    if len(ordered) < 2:
        return None
    return next((r for r in ordered[1:] if r["p50_ms"] >= KNEE * ordered[0]["p50_ms"]), None)


def knee_findings(rows: Sequence[dict[str, Any]], predicted: dict[str, dict[str, Any]]) -> list[str]:
    """Per mode: the predicted capacity beside the knee and the most answered; what a small --max-pending did."""
    found = []
    for mode, model in predicted.items():
        mine = [r for r in rows if r["mode"] == mode]
        bounds = sorted({r["max_pending"] for r in mine}, reverse=True)
        if not bounds:
            continue
        loose = [r for r in mine if r["max_pending"] == bounds[0]]
        capacity, first = model["capacity_rps"], min(loose, key=lambda r: r["offered_rps"])
        knee = knee_step(loose)
        most = max(r["ok_rps"] for r in loose)
        sentence = (f"/{mode}: predicted capacity {capacity:.1f} req/s ({model['lanes']} lane(s) / t "
                    f"{model['t_s']:.3f} s); with --max-pending {bounds[0]}, the median answer took "
                    f"{_ms(first['p50_ms'])} at {first['offered_rps']:g} req/s offered")  # fmt: skip
        if knee is not None:
            sentence += (f" and {_ms(knee['p50_ms'])} at {knee['offered_rps']:g} req/s "
                         f"({knee['offered_rps'] / capacity:.2f}x the prediction): the knee")  # fmt: skip
        else:
            sentence += f"; no step took {KNEE:g}x that: no knee within the steps"
        found.append(f"{sentence}; at most {most:g} req/s were answered ({most / capacity:.2f}x the prediction).")
        if first["p50_ms"]:
            # t was timed alone; under load a request may take another time (a busier or an idler host).
            loaded = model["lanes"] / (first["p50_ms"] / 1000)
            found.append(f"/{mode}: the lowest step's median answer, {_ms(first['p50_ms'])}, makes the capacity "
                         f"{loaded:.1f} req/s ({model['lanes']} lane(s) / that median; "
                         f"{loaded / capacity:.2f}x the prediction from t alone).")  # fmt: skip
        top = max(r["offered_rps"] for r in mine)
        for bound in bounds[1:]:
            big = next(r for r in loose if r["offered_rps"] == top)
            small = next((r for r in mine if r["max_pending"] == bound and r["offered_rps"] == top), None)
            if small is None or big["p50_ms"] is None or small["p50_ms"] is None:
                continue
            found.append(
                f"/{mode} at {top:g} req/s offered ({top / capacity:.2f}x): with --max-pending {bounds[0]} the "
                f"median answer took {_ms(big['p50_ms'])} (95th percentile {_ms(big['p95_ms'])}, {big['rejected']} "
                f"503s); with --max-pending {bound}, {_ms(small['p50_ms'])} (95th percentile {_ms(small['p95_ms'])}) "
                f"and {small['rejected']} of {small['sent']} turned away at once with 503."
            )
    return found
