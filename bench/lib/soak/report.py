"""The soak's verdict and its files: soak.json (every sample, fault and outcome), soak.md, requests.csv.

soak.json's keys: `verdict` (`ok` and every `checks` entry), `unaccounted`,
`requests` (the tally and per route what each request got), `faults` (each
with what it was designed to cause, what was observed and what each of its
requests got), `samples` (per process key: RSS, descriptors, threads,
children over time), `processes` (each key's role and pids), `baseline`,
`checks` (the quiet checks), `stats` (the lab's /stats per tick), `mix`,
`prediction`, `capacity`, `settings`, `machine`.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import asdict
from typing import Any

from bench.lib.soak.ledger import Record, Window, by_route, classify, shown, tally, unexpected, what
from bench.lib.soak.run import Run
from bench.lib.soak.settle import Settled
from bench.lib.soak.verdict import (
    Check,
    accounting_check,
    growth_check,
    orphan_check,
    ping_check,
    trend,
    trend_check,
    unexpected_check,
)
from bench.lib.tables import Column, markdown_table

SHOWN_UNEXPECTED = 100  # soak.json lists at most this many unexpected requests (all are in requests.csv)


def judge(run: Run) -> list[Check]:
    """Classify every request, then apply every rule: accounting, errors, faults, baseline returns, RSS, ping."""
    records = run.link.ledger.records
    windows = [fault.window() for fault in run.faults if not fault.skipped]
    classify(records, windows)
    checks = [accounting_check(tally(records)), unexpected_check(unexpected(records))]
    checks += [_fault_check(fault) for fault in run.faults]
    baseline = run.baseline
    if baseline is None or not baseline.matched:
        checks.append(Check("baseline return", "baseline", False, "the lab never held still long enough for a "
                            f"baseline (within --settle {run.plan.settle_s:g} s)", {}))  # fmt: skip
    if baseline is None:
        return checks
    checks += [settled.check for settled in run.checks if settled.check is not None]
    checks += [orphan_check(settled.label, settled.orphans) for settled in [baseline, *run.checks]]
    checks += rss_checks(run, baseline)
    checks.append(_ping(run, records, windows, baseline))
    return checks


def _fault_check(fault: Any) -> Check:
    subject = f"fault {fault.number} {fault.name} ({fault.phase})"
    if fault.skipped:
        return Check("fault", subject, True, f"skipped: {fault.skipped}", {})
    words = f"{fault.designed}; observed {fault.observed}"
    return Check("fault", subject, fault.ok, words, dict(fault.observed))


def rss_checks(run: Run, baseline: Settled) -> list[Check]:
    """Per process key: RSS at every later quiet check within the limit of its baseline, and no upward trend over
    the last half (samples of the process that holds the key at the end, once it is as old as the warm-up)."""
    found = []
    middle = (baseline.at + run.ended) / 2
    for key, base in sorted(baseline.rss.items()):
        readings = [(settled.label, settled.rss[key]) for settled in run.checks if key in settled.rss]
        found.append(growth_check(key, base, readings))
        late = trend_samples(run.watch.series.get(key, []), middle, run.plan.warmup_s)
        found.append(trend_check(key, base, trend([s["t"] for s in late], [s["rss_bytes"] for s in late])))
    return found


def trend_samples(series: Sequence[Mapping[str, Any]], middle: float, warmup_s: float) -> list[Mapping[str, Any]]:
    """The samples a key's trend is fitted to: its last process's, from the last half, outside quiet checks, and
    none from that process's own first `warmup_s`. A replacement climbs as a new server does (an hour's soak
    fitted +104 %/h to a pool worker's first two minutes, replaced every five): a climb the baseline's warm-up
    was there to leave out, not a leak; its growth check still compares it with the baseline."""
    if not series:
        return []
    last_pid = series[-1]["pid"]
    born = min(s["t"] for s in series if s["pid"] == last_pid)
    return [s for s in series if s["pid"] == last_pid and s["t"] >= max(middle, born + warmup_s)
            and s["phase"] != "settle"]  # fmt: skip


def _ping(run: Run, records: Sequence[Record], windows: Sequence[Window], baseline: Settled) -> Check:
    """/ping latency after the baseline, outside the faults' windows, first half against last."""
    start, end = run.watch.started + baseline.at, run.watch.started + run.ended
    middle = (start + end) / 2
    pings = [r for r in records if r.kind == "ping" and r.outcome == "ok" and r.sent >= start
             and not any(w.overlaps(r) for w in windows)]  # fmt: skip
    first = [1000 * (r.received - r.sent) for r in pings if r.sent < middle]
    last = [1000 * (r.received - r.sent) for r in pings if r.sent >= middle]
    return ping_check(first, last)


def fault_doc(run: Run, fault: Any) -> dict[str, Any]:
    """A fault as soak.json keeps it: times relative to the watch, its own requests one by one, the others it
    explains counted by result."""
    records = run.link.ledger.records
    own = [shown(r) for r in records if r.fault == fault.number]
    for item in own:
        item["sent"] = round(item["sent"] - run.watch.started, 2)
    collateral = Counter(f"{r.route} {what(r)}" for r in records if r.because == fault.number and r.fault is None)
    doc = asdict(fault)
    doc.pop("effects")
    return {**doc, "started": round(fault.started - run.watch.started, 2), "ended": round(fault.ended -
            run.watch.started, 2), "effects": [asdict(e) for e in fault.effects], "requests": own,
            "collateral": dict(collateral)}  # fmt: skip


def document(run: Run, checks: Sequence[Check], extra: Mapping[str, Any]) -> dict[str, Any]:
    """soak.json."""
    records = run.link.ledger.records
    counted = tally(records)
    bad = [r for r in records if r.outcome in ("unexpected", "unaccounted")]
    held_back = run.traffic.held_back if run.traffic else 0
    return {
        "tool": "bench.soak",
        **extra,
        "verdict": {"ok": all(c.ok for c in checks), "checks": [c.as_dict() for c in checks]},
        "unaccounted": counted["unaccounted"],
        "requests": {**counted, "held_back": held_back, "by_route": by_route(records)},
        "unexpected": [shown(r) for r in bad[:SHOWN_UNEXPECTED]],
        "faults": [fault_doc(run, fault) for fault in run.faults],
        "samples": run.watch.series,
        "processes": processes(run),
        "baseline": None if run.baseline is None else run.baseline.as_dict(),
        "checks": [settled.as_dict() for settled in run.checks],
        "stats": run.watch.stats_series,
        "mix": {
            "entries": [e.as_dict() for e in run.mix_doc.get("entries", [])],
            "skipped": run.mix_doc.get("skipped"),
        },
        "prediction": run.rate,
        "capacity": None if run.capacity is None else asdict(run.capacity),
        "pings": pings(run),
        "traffic_s": round(run.ended - run.began, 1),
    }


def processes(run: Run) -> dict[str, dict[str, Any]]:
    """Each process key's role and every pid that held it."""
    series = run.watch.series
    return {
        key: {"role": role, "pids": sorted({s["pid"] for s in series[key]})} for key, role in run.watch.roles.items()
    }


def pings(run: Run) -> list[list[float]]:
    """Every answered /ping: [seconds since the watch began, milliseconds]."""
    return [[round(r.sent - run.watch.started, 2), round(1000 * (r.received - r.sent), 2)]
            for r in run.link.ledger.records if r.kind == "ping" and r.status == 200]  # fmt: skip


PROCESS_COLUMNS = (
    Column("key", "process", "{}"),
    Column("pids", "pids", "{:d}"),
    Column("base_mb", "RSS at baseline MiB", "{:.1f}"),
    Column("end_mb", "RSS at end MiB", "{:.1f}"),
    Column("growth", "max growth %", "{:+.1f}"),
    Column("trend", "trend %/h (95 %)", "{}"),
    Column("fds", "fds base/end", "{}"),
    Column("threads", "threads base/end", "{}"),  # at the baseline and the last quiet check
)


def process_rows(doc: Mapping[str, Any]) -> list[dict[str, Any]]:
    """One row per process key with a baseline: its RSS then and at the end, the growth and the trend checks."""
    checks = {(c["rule"], c["subject"]): c for c in doc["verdict"]["checks"]}
    rows = []
    for key, base in sorted((doc["baseline"] or {}).get("rss_bytes", {}).items()):
        growth, slope = checks.get(("rss growth", key), {}), checks.get(("rss trend", key), {})
        numbers = slope.get("numbers", {})
        last_check = doc["checks"][-1] if doc["checks"] else {}
        first, last = doc["baseline"]["per_key"].get(key, {}), last_check.get("per_key", {}).get(key, {})
        rows.append({
            "key": key, "pids": len(doc["processes"].get(key, {}).get("pids", [])), "base_mb": base / 2**20,
            "end_mb": growth.get("numbers", {}).get("final_bytes", base) / 2**20,
            "growth": growth.get("numbers", {}).get("max_growth_pct", 0.0),
            "trend": (f"{numbers['slope_pct_per_hour']:+.2f} ({numbers['low_pct_per_hour']:+.2f} to "
                      f"{numbers['high_pct_per_hour']:+.2f}) {numbers['status']}") if "samples" in numbers
            else numbers.get("status", "-"),
            "fds": f"{first.get('fds', '-')}/{last.get('fds', '-')}",
            "threads": f"{first.get('threads', '-')}/{last.get('threads', '-')}",
        })  # fmt: skip
    return rows


def _own_cost(doc: Mapping[str, Any]) -> str:
    """What the soak itself cost the machine it measured."""
    spent, wall = doc["machine"].get("soak_cpu_s", 0.0), doc["machine"].get("wall_s") or 0.0
    share = f", {spent / wall:.1%} of one core over its {wall / 60:.1f} min" if wall else ""
    return f"The soak itself (client, sampler, this report) used {spent:.1f} s of CPU{share}."


def markdown(doc: Mapping[str, Any]) -> str:
    """soak.md: the verdict, the checks that failed, the processes, the faults, the requests."""
    verdict = doc["verdict"]
    failed = [c for c in verdict["checks"] if not c["ok"]]
    requests = doc["requests"]
    lines = [f"# Soak of {doc['url']}: {'PASS' if verdict['ok'] else 'FAIL'}", "",
             f"{doc['traffic_s'] / 60:.1f} min of traffic at {doc['prediction'].get('rate_rps', 0):.2f} requests/s "
             f"({doc['settings']['load']:.0%} of the {doc['prediction'].get('capacity_rps', 0):.2f}/s predicted, "
             f"bound by {doc['prediction'].get('bound')}); {len(doc['faults'])} faults; "
             f"{len(verdict['checks'])} checks, {len(failed)} failed.", "",
             f"Requests: sent {requests['sent']:,} = answered {requests['answered']:,} + counted errors "
             f"{requests['counted_errors']:,} + unaccounted {requests['unaccounted']:,} ({requests['held_back']:,} "
             "arrivals held back: too many in flight); "
             + ", ".join(f"{k} {requests[k]:,}" for k in ("ok", "expected", "unexpected", "aborted", "cut")) + ".",
             "", _own_cost(doc), "", *(f"> {note}" for note in doc.get("notes", [])), ""]  # fmt: skip
    if failed:
        lines += ["## Failed checks", "", *(f"- **{c['rule']}**, {c['subject']}: {c['detail']}" for c in failed), ""]
    lines += ["## Processes", "", markdown_table(process_rows(doc), PROCESS_COLUMNS), "", "## Faults", ""]
    for fault in doc["faults"]:
        state = "skipped" if fault["skipped"] else ("held" if fault["ok"] else "FAILED")
        lines.append(f"- {fault['number']} **{fault['name']}** ({fault['phase']}, at {fault['started']:.0f} s): "
                     f"{state}. {fault['skipped'] or fault['designed']}. Observed: {fault['observed']}; "
                     f"collateral: {fault['collateral'] or 'none'}")  # fmt: skip
    lines += ["", "## Quiet checks", "", *(f"- {c['label']} at {c['at']:.0f} s: "
              f"{c['check']['detail'] if c['check'] else 'baseline'}" for c in [doc['baseline'] or {}, *doc['checks']]
              if c), "", "## Requests by route", ""]  # fmt: skip
    lines += [f"- `{route}`: " + ", ".join(f"{got} x {n:,}" for got, n in got_counts.items())
              for route, got_counts in requests["by_route"].items()]  # fmt: skip
    return "\n".join(lines) + "\n"
