"""bench/compare.py's findings: sentences written from the measured rows, one function per preset.

Each takes the rows of compare.json (bench/compare.py's ROW_KEYS and more)
and says what they show, in numbers taken from them: no sentence is written
that the rows do not bear out.
"""

from __future__ import annotations

from typing import Any

from bench.lib.tables import spread_text
from lab.machine import cpu_count


def _by(rows: list[dict[str, Any]], **match: Any) -> list[dict[str, Any]]:
    return [r for r in rows if all(r.get(k) == v for k, v in match.items())]


def _best(rows: list[dict[str, Any]]) -> dict[str, Any]:
    return min(rows, key=lambda r: r["elapsed_s"])


def _spread(row: dict[str, Any]) -> str:
    return spread_text(row["spread"])


def _name(row: dict[str, Any]) -> str:
    return f"{row['server']} {row['config']}"


def _names(rows: list[dict[str, Any]]) -> str:
    return ", ".join(f"{_name(r)} {r['elapsed_s']:.2f} s ({r['ratio']:.2f}x its ideal, {_spread(r)})" for r in rows)


def _wait(ms: float) -> str:
    return f"{ms:.0f} ms" if ms < 1000 else f"{ms / 1000:.1f} s"


def _delay(row: dict[str, Any]) -> float:
    return float(row["params"]["delay"])


def _rounds(row: dict[str, Any]) -> int:
    """How many rounds of waiting a burst took: 1 when every wait was held at once."""
    return max(1, round(float(row["elapsed_s"]) / _delay(row)))


def side_by_side(rows: list[dict[str, Any]]) -> list[str]:
    found = []
    cpu = sorted(_by(rows, workload="count"), key=lambda r: r["elapsed_s"])
    spread = [r for r in cpu if len(r["spread"]) > 1]
    single = [r for r in cpu if len(r["spread"]) == 1]
    if spread and single:
        verdict = (
            "every one that spread the work beat every one that kept it in one process: threads share one GIL, "
            "processes do not."
            if spread[-1]["elapsed_s"] < single[0]["elapsed_s"]
            else f"the two overlap: {_name(spread[-1])} took longer than {_name(single[0])} (see its ratio, reach "
            "and spread)."
        )
        found.append(
            f"CPU-bound, {cpu[0]['concurrency']} requests at once: where the work spread over processes it took "
            f"{_names(spread)}; in one process, {_names(single)}. So {verdict}"
        )
    answered = sorted((r for r in cpu if r["ping_max_ms"] is not None), key=lambda r: r["ping_max_ms"])
    handing = [r for r in answered if r["server"] == "lab" and r["mode_model"] in ("processing", "distributed")]
    if answered:
        calm = handing[0] if handing else answered[0]
        stuck = answered[-1]
        sentence = f"Meanwhile a trivial request (/ping) waited {_wait(calm['ping_max_ms'])} at worst on {_name(calm)}"
        if handing:
            sentence += ", whose event loop only hands the work out"
        if stuck is not calm and stuck["ping_max_ms"] >= max(100.0, 10 * calm["ping_max_ms"]):
            sentence += (
                f", and {_wait(stuck['ping_max_ms'])} on {_name(stuck)}: a request that finds every worker computing "
                "waits for one to finish, or among threads for its turn at the GIL"
            )
        found.append(sentence + ".")
    io = sorted(_by(rows, workload="upstream"), key=lambda r: r["elapsed_s"])
    if io:
        held = [r for r in io if _rounds(r) == 1]
        missed = [r for r in io if _rounds(r) > 1]
        what = (
            f"{', '.join(_name(r) for r in held)} held them all at once ({held[0]['elapsed_s']:.2f}-"
            f"{held[-1]['elapsed_s']:.2f} s)"
            if held
            else "no server held them all at once"
        )
        if missed:
            what += "; " + ", ".join(f"{_name(r)} took {r['elapsed_s']:.2f} s ({_rounds(r)} rounds)" for r in missed)
        found.append(f"Waiting, {io[0]['concurrency']} calls of {_delay(io[0]):g} s each: {what}.")
    return found


def processes(rows: list[dict[str, Any]]) -> list[str]:
    found = []
    for server in ("uwsgi", "gunicorn"):
        mine = sorted(_by(rows, server=server), key=lambda r: r["processes"])
        if len(mine) < 2:
            continue
        one, best = mine[0], _best(mine)
        if best is one:
            found.append(f"{server}: more processes did not help here: {one['config']} took {one['elapsed_s']:.2f} s, "
                         f"the fastest.")  # fmt: skip
            continue
        sentence = (
            f"{server}: {one['config']} took {one['elapsed_s']:.2f} s and {best['config']} {best['elapsed_s']:.2f} s, "
            f"{one['elapsed_s'] / best['elapsed_s']:.2f}x faster on {cpu_count()} cores"
        )
        over = [r for r in mine if r["processes"] > cpu_count()]
        if over and min(r["elapsed_s"] for r in over) > best["elapsed_s"]:
            took = ", ".join(f"{r['config']} {r['elapsed_s']:.2f} s" for r in over)
            sentence += f"; more processes than cores took longer ({took}): they only take turns"
        found.append(sentence + ".")
    return found


def grid(rows: list[dict[str, Any]]) -> list[str]:
    found = []
    cpu = sorted(_by(rows, workload="count"), key=lambda r: (r["processes"], r["threads"]))
    io = sorted(_by(rows, workload="upstream"), key=lambda r: (r["processes"] * r["threads"], r["elapsed_s"]))
    advice = []
    if cpu:
        counts = sorted({r["processes"] for r in cpu})
        per = "; ".join(f"-p {p}: " + ", ".join(f"{r['elapsed_s']:.2f} s with {r['threads']} thread(s)"
                                               for r in _by(cpu, processes=p)) for p in counts)  # fmt: skip
        best = _best(cpu)
        one = _best(_by(cpu, processes=counts[0]))
        pace = (
            f"Processes set the pace: the best with {best['processes']} took {best['elapsed_s']:.2f} s, "
            f"{one['elapsed_s'] / best['elapsed_s']:.2f}x faster than the best with {counts[0]}."
            if best is not one
            else f"More processes did not help here: the best was with {counts[0]}."
        )
        found.append(f"CPU-bound, {best['concurrency']} requests: {per}. {pace}")
        # Threads judged by the ratio to each row's own ideal, so that the host's speed, which moves `t`
        # from one configuration to the next, does not pass for an effect of the threads.
        moved = [r["ratio"] - base["ratio"] for r in cpu if r["threads"] > 1
                 for base in _by(cpu, processes=r["processes"], threads=1)]  # fmt: skip
        lopsided = [r for r in cpu if r["processes"] > 1 and max(r["spread"].values(), default=0)
                    > -(-r["concurrency"] // r["processes"]) + 1]  # fmt: skip
        helped = bool(moved) and min(moved) < -0.1
        if moved:
            sentence = (
                f"Threads beside the processes moved the ratio to the ideal by {min(moved):+.2f} to "
                f"{max(moved):+.2f} against one thread each"
                + (": somewhere they helped." if helped else ": the GIL lets one of them compute at a time.")
            )
            if lopsided:
                worst = max(lopsided, key=lambda r: max(r["spread"].values()))
                sentence += (
                    f" With -p {worst['processes']} --threads {worst['threads']} the requests split {_spread(worst)} "
                    f"(ratio {worst['ratio']:.2f}): a process with idle threads keeps accepting while it computes."
                )
            found.append(sentence)
        threads = "" if helped or not moved else ", one thread each"
        advice.append(f"for computing, {best['processes']} processes{threads} ({cpu_count()} cores here)")
    if io:
        held = ", ".join(f"{r['processes'] * r['threads']} at once (-p {r['processes']} --threads {r['threads']}) "
                         f"{r['elapsed_s']:.2f} s" for r in io)  # fmt: skip
        found.append(
            f"I/O-bound, {io[0]['concurrency']} calls of {_delay(io[0]):g} s: a request holds its thread while it "
            f"waits, so processes x threads waits run at once: {held}."
        )
        enough = [r for r in io if _rounds(r) == 1]
        if enough:
            least = enough[0]
            advice.append(f"for {least['concurrency']} waits at once, {least['processes'] * least['threads']} threads "
                          f"in all (-p {least['processes']} --threads {least['threads']}), or coroutines "
                          "(--preset coroutines)")  # fmt: skip
    if advice:
        found.append("So: " + "; ".join(advice) + ".")
    return found


def coroutines(rows: list[dict[str, Any]]) -> list[str]:
    found = []
    for level in sorted({r["concurrency"] for r in rows}):
        mine = _by(rows, concurrency=level)
        parts = ", ".join(f"{_name(r)} {r['elapsed_s']:.2f} s" for r in mine)
        found.append(f"{level} requests each waiting {_delay(mine[0]):g} s: {parts}.")
    big = max((r["concurrency"] for r in rows), default=0)
    at_big = _by(rows, concurrency=big)
    held = [r for r in at_big if r["mode_model"] == "async" and _rounds(r) == 1]
    threaded = [r for r in at_big if r["mode_model"] == "threading" and r["processes"] and r["threads"]]
    if held:
        names = ", ".join(_name(r) for r in held)
        costs = ", ".join(f"{r['peak_threads']} threads and {r['rss_mb']:.0f} MB" for r in held)
        found.append(f"At {big}, {names} held every wait at once ({costs} at the peak).")
    for row in threaded:
        lanes = row["processes"] * row["threads"]
        found.append(
            f"{_name(row)} can hold {lanes} waits at once, so {big} take ceil({big}/{lanes}) = {-(-big // lanes)} "
            f"rounds: {row['elapsed_s']:.2f} s ({_rounds(row)} measured)."
        )
    return found
