"""Step 5 of the advisor: the recommendation, checked against what the sweep measured, and how it is written down.

The model's point is recommended when the sweep measured it within NOISE of
the best point swept (on a shared host two runs of one point differ by about
that much, and the model's point is the smaller one) and no more than
RULE_MARGIN below the better rule of thumb (a rule people would apply
anyway). Otherwise the best point measured is, and the answer says by how
much the model missed; size.json's `verdict` keeps both.
"""

from __future__ import annotations

from typing import Any

from bench.lib.sizing.model import Point, Split
from bench.lib.sizing.points import Swept
from bench.lib.tables import Column, columns, markdown_table

NOISE = 0.10
RULE_MARGIN = 0.05  # the goal: never more than 5 % below the better rule of thumb

TABLE = columns(
    Column("label", "processes x threads"), Column("roles", "why swept"),
    Column("predicted_rps", "predicted req/s"), Column("closed_rps", "measured req/s"),
    Column("predicted_p95_ms", "predicted p95 ms"), Column("closed_p95_ms", "measured p95 ms"),
    Column("open_rps", "open: answered/s"), Column("predicted_open_p95_ms", "open: predicted p95 ms"),
    Column("open_p95_ms", "open: p95 ms"), Column("shed", "open: shed", "{:d}"), Column("failed", "failed", "{:d}"),
    Column("switches", "switches/req"), Column("uss_mb", "USS MB"),
)  # fmt: skip


def flags(point: Point) -> dict[str, str]:
    """The same sizing as each server takes it."""
    p, t = point.processes, point.threads
    return {
        "lab": f"--processes {p} --thread-pool {t}",
        "gunicorn": f"-k gthread -w {p} --threads {t}",
        "uwsgi": f"--processes {p} --threads {t}",
    }


def _rps(summary: dict[str, dict[str, Any]], point: Point) -> float:
    return float(summary.get(point.label, {}).get("closed_rps") or 0.0)


def choose(predicted: Point, points: list[Swept], summary: dict[str, dict[str, Any]]) -> tuple[Point, str]:
    """The recommendation and why it is that one: the model's point if the sweep measured it within NOISE of the
    best point and no more than RULE_MARGIN below the better rule of thumb; else the best point measured."""
    best = max((s.point for s in points), key=lambda p: _rps(summary, p))
    rules = [s.point for s in points if s.is_rule]
    rule_rps = max((_rps(summary, p) for p in rules), default=0.0)
    mine = _rps(summary, predicted)
    if mine >= (1 - NOISE) * _rps(summary, best) and mine >= (1 - RULE_MARGIN) * rule_rps:
        return predicted, "the model's point, measured within 10 % of the best point swept"
    return best, (
        f"the best point measured: the model's {predicted.label} measured "
        f"{mine / max(_rps(summary, best), 1e-9):.0%} of it"
    )


def verdict(points: list[Swept], summary: dict[str, dict[str, Any]], chosen: Point, predicted: Point) -> dict[str, Any]:
    """The goal's two checks, for the recommendation and for the model's own point."""
    best = max((s.point for s in points), key=lambda p: _rps(summary, p))
    rules = [s.point for s in points if s.is_rule]
    rule = max(rules, key=lambda p: _rps(summary, p)) if rules else None
    top = max(_rps(summary, best), 1e-9)

    def against(point: Point) -> dict[str, Any]:
        of_best = round(_rps(summary, point) / top, 3)
        of_rule = 1.0 if rule is None else round(_rps(summary, point) / max(_rps(summary, rule), 1e-9), 3)
        return {
            "point": point.label,
            "of_best": of_best,
            "of_best_rule": of_rule if rule else None,
            "within_10pct_of_best": of_best >= 1 - NOISE,
            "not_5pct_below_rule": of_rule >= 1 - RULE_MARGIN,
        }

    return {
        "best": {"point": best.label, "rps": _rps(summary, best)},
        "best_rule": None if rule is None else {"point": rule.label, "rps": _rps(summary, rule)},
        "recommendation": against(chosen),
        "predicted": against(predicted),
    }


def why(split: Split, cores: float, chosen: Point, summary: dict[str, dict[str, Any]], best: str) -> str:
    """One sentence: the measured split, what it implies, what the sweep measured there."""
    alone = split.alone_ms
    parts = (
        f"a request computed {split.cpu_ms:.1f} ms ({split.cpu_ms / alone:.0%}, {split.gil_ms:.1f} ms of it holding "
        f"the GIL) and waited {split.wait_ms:.1f} ms ({split.wait_ms / alone:.0%}) of its {alone:.1f} ms alone"
    )
    threads = 1 + (split.wait_ms + split.handoff_ms) / split.cpu_ms
    reason = (
        f"{cores:g} cores' worth of CPU take about {cores * split.gil_ms / split.cpu_ms:.1f} processes "
        f"(one core of GIL-held work each), and past 1 + (wait + hand-off)/cpu = {threads:.1f} threads a process "
        f"({chosen.threads} here) one request computes while the others wait"
    )
    measured = summary.get(chosen.label, {})
    return (
        f"{parts[0].upper()}{parts[1:]}: {reason}; {chosen.label} measured {measured.get('closed_rps')} req/s "
        f"(p95 {measured.get('closed_p95_ms')} ms), the best point swept being {best}."
    )


def rows(points: list[Swept], predictions: dict[str, dict[str, Any]],
         summary: dict[str, dict[str, Any]]) -> list[dict[str, Any]]:  # fmt: skip
    """size.json's points: each with its roles, what the model predicted and what the sweep measured."""
    found = []
    for swept in points:
        label = swept.point.label
        found.append({
            "label": label, "processes": swept.point.processes, "threads": swept.point.threads,
            "roles": list(swept.roles), "predicted": predictions[label], "measured": summary.get(label),
        })  # fmt: skip
    return found


def table_rows(points: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """One flat row per point for the table."""
    flat = []
    for point in points:
        predicted, measured = point["predicted"], point["measured"] or {}
        flat.append({
            "label": point["label"], "roles": ", ".join(r.removeprefix("rule: ") for r in point["roles"]),
            "predicted_rps": predicted["closed_rps"], "closed_rps": measured.get("closed_rps"),
            "predicted_p95_ms": predicted["closed_p95_ms"], "closed_p95_ms": measured.get("closed_p95_ms"),
            "open_rps": measured.get("open_rps"), "predicted_open_p95_ms": predicted["open_p95_ms"],
            "open_p95_ms": measured.get("open_p95_ms"), "shed": measured.get("shed", 0),
            "failed": measured.get("failed", 0),
            "switches": measured.get("switches"), "uss_mb": (measured.get("memory") or {}).get("uss_mb"),
        })  # fmt: skip
    return flat


def markdown(doc: dict[str, Any]) -> str:
    """size.md: the answer first, then the split, the table, the flags, the warnings."""
    rec, split, cores = doc["recommendation"], doc["split"], doc["cores"]
    check = doc["verdict"]["recommendation"]
    lines = [
        f"# Sizing {doc['target']['name']}",
        "",
        f"**{rec['processes']} processes x {rec['threads']} threads** ({rec['chosen_because']}).",
        "",
        rec["why"],
        "",
        f"- lab: `{rec['flags']['lab']}`",
        f"- gunicorn: `{rec['flags']['gunicorn']}`",
        f"- uWSGI: `{rec['flags']['uwsgi']}`",
        f"- memory there: {rec['memory']}; each added thread: {doc['memory_per_thread_mb']} MB (USS, measured "
        "between points with the same processes)",
        f"- of the best point swept: {check['of_best']:.0%}; of the better rule of thumb: "
        f"{check['of_best_rule'] or 1.0:.0%}",
        "",
        f"Cores: {cores['usable']} usable ({cores['note']}); the host gave "
        f"{doc['measured']['reach']['effective_cores']:g} cores' worth just before the sweep, which the predicted "
        f"throughputs are for. Split alone: CPU {split['cpu_ms']} ms (GIL-held "
        f"{split['gil_ms']} ms), waited {split['wait_ms']} ms, {split['alone_ms']} ms in all; a thread's hand-off "
        f"to its next request {split['handoff_ms']} ms; the load generator's CPU here "
        f"{split['client_cpu_ms']} ms a request (same cores, budgeted); two threads in one "
        f"process: {doc['measured']['gil_wait_ms_two_threads']} ms waiting for the other.",
        "",
        f"Closed load: {doc['plan']['users']} users for {doc['plan']['closed_s']} s; open load: "
        f"{doc['plan']['rate']} requests/s for {doc['plan']['open_s']} s; {doc['plan']['rounds']} round(s).",
        "",
        markdown_table(table_rows(doc["points"]), TABLE),
        "",
        *[f"- warning: {w}" for w in doc["warnings"]],
        *[f"- {note}" for note in doc["notes"]],
    ]
    return "\n".join(lines) + "\n"


def recommendation(chosen: Point, because: str, why_text: str, summary: dict[str, dict[str, Any]],
                   predictions: dict[str, dict[str, Any]]) -> dict[str, Any]:  # fmt: skip
    """size.json's `recommendation`: integer processes and threads, why, its flags, predicted and measured."""
    measured = summary.get(chosen.label, {})
    memory = measured.get("memory") or {}
    return {
        "processes": chosen.processes,
        "threads": chosen.threads,
        "label": chosen.label,
        "chosen_because": because,
        "why": why_text,
        "flags": flags(chosen),
        "predicted": predictions.get(chosen.label),
        "measured": measured,
        "memory": f"RSS {memory.get('rss_mb')} MB, USS {memory.get('uss_mb')} MB, PSS {memory.get('pss_mb')} MB "
        f"in {len(memory.get('processes', []))} serving process(es), {memory.get('threads')} threads",
    }
