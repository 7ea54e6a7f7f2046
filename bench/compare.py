"""The servers people choose between, side by side: the lab's modes, uWSGI and gunicorn, on the same workloads.

    make compare                                   # the default comparison, about 5 minutes on 2 cores
    python -m bench.compare --preset processes     # do multiple processes use multiple cores?
    python -m bench.compare --preset grid          # processes x threads, for CPU-bound and I/O-bound work
    python -m bench.compare --preset coroutines    # uWSGI+gevent and the lab's /async, 10 and 200 waiting
    python -m bench.compare --quick                # small workloads, fewer configurations (2 per server)

Every configuration is started in turn, as a user starts it (bench/peers.py:
`server.py`, `uwsgi --ini peers/...`, `gunicorn -c peers/...`), and given the
same loads by the same clients: the Python race (bench/engine.py: requests
released together, /ping probed meanwhile, the ideal from the lab's own
capacity model) and then siege. Waiting loads call one upstream shared by
all (the lab's, started here). Meanwhile the server's process tree is
sampled (peak processes, threads, RSS) and, for uWSGI, its stats socket
(what uwsgitop shows: requests and busy time per worker).

Writes to bench/results/compare-<stamp>/ (or --out): compare.json (a list of
rows: server, config, workload, endpoint, concurrency, elapsed_s, mean_s,
ideal_s, ratio, ping_p50_ms, ping_max_ms, spread, peak_processes,
peak_threads, rss_mb, and more), findings.json, compare.md (the table, one
sentence per finding, the workers' view, what could not be measured),
compare.png, per row its race (race-<n>.json) and siege's output, and per
configuration the server's log. A configuration that fails is reported and
the others still run; whatever was measured is written.
"""

from __future__ import annotations

import argparse
import json
import shutil
import subprocess
import sys
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

if __package__ in (None, ""):  # run as `python bench/compare.py`: make the `bench` package importable
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench import charts
from bench.args import stop_on_sigterm
from bench.engine import Event, get, race
from bench.peers import BIN, Running, Setup, WorkerView, gunicorn, lab, uwsgi
from bench.servers import ServerError
from bench.siege_steps import SIEGERC, parse_siege
from bench.summary import Column, machine_facts, markdown_table, new_results_dir, spread_text, text_table
from lab.config import cpu_count
from lab.procs import EmbeddedUpstream

CPU, IO = frozenset({"cpu"}), frozenset({"io"})
BOTH = CPU | IO

# The keys every row of compare.json carries (README, "Peers").
ROW_KEYS = ("server", "config", "workload", "endpoint", "concurrency", "elapsed_s", "mean_s", "ideal_s", "ratio",
            "ping_p50_ms", "ping_max_ms", "spread", "peak_processes", "peak_threads", "rss_mb")  # fmt: skip

COLUMNS = (
    Column("server", "server", "{}"),
    Column("config", "config", "{}"),
    Column("workload", "workload", "{}"),
    Column("concurrency", "c", "{:d}"),
    Column("elapsed_s", "elapsed s"),
    Column("mean_s", "mean s"),
    Column("ideal_s", "ideal s"),
    Column("ratio", "ratio"),
    Column("reachable_ratio", "reach"),
    Column("ping_max_ms", "worst /ping ms", "{:.0f}"),
    Column("spread", "spread", "{}"),
    Column("peak_processes", "procs", "{:d}"),
    Column("peak_threads", "threads", "{:d}"),
    Column("rss_mb", "RSS MB", "{:.0f}"),
    Column("siege_elapsed_s", "siege s"),
)


@dataclass(frozen=True)
class Load:
    """One burst: `concurrency` requests of `workload` released together."""

    kind: str  # "cpu" (computing) or "io" (waiting for the upstream)
    workload: str
    params: dict[str, str]
    concurrency: int = 10


@dataclass(frozen=True)
class Preset:
    name: str
    question: str
    setups: Callable[[int, bool], list[Setup]]  # (cores, quick)
    loads: Callable[[bool], list[Load]]  # (quick)
    findings: Callable[[list[dict[str, Any]]], list[str]]


def _count(quick: bool) -> Load:
    return Load("cpu", "count", {"n": "2000000" if quick else "20000000"})


def _waits(quick: bool, concurrency: int = 10) -> Load:
    return Load("io", "upstream", {"delay": "0.2" if quick else "1.0"}, concurrency)


# ---------- the presets ----------


def _side_by_side(cores: int, quick: bool) -> list[Setup]:
    setups = [
        lab("/processing", "/processing", "processing"),
        lab("/threading", "/threading", "threading"),
        lab("/blocking", "/blocking", "blocking"),
        lab("/async", "/async", "async", serves=IO),
        lab(f"--processes {cores}, /threading", "/threading", "threading", "--processes", str(cores)),
        # Tornado's own accept policy, for the lesson: an uneven spread, but a free event loop answers /ping.
        lab(
            f"--processes {cores} --accept all, /threading",
            "/threading",
            "threading",
            "--accept",
            "all",
            "--processes",
            str(cores),
        ),
        uwsgi("uwsgi-processes.ini", f"-p {cores}", "blocking", cores, serves=CPU),
        uwsgi("uwsgi-threads.ini", "-p 1 --threads 10", "threading", 1, 10, serves=BOTH),
        uwsgi("uwsgi-gevent.ini", "-p 1 --gevent 1000", "async", 1, serves=IO),
        gunicorn("gunicorn-sync.conf.py", f"sync -w {cores}", "blocking", cores, serves=CPU),
        gunicorn("gunicorn-gthread.conf.py", "gthread -w 1 --threads 10", "threading", 1, 10, serves=BOTH),
    ]
    if quick:  # two of each server: enough to see processes, threads and the spread
        keep = {"/processing", "/threading", f"-p {cores}", "-p 1 --threads 10", f"sync -w {cores}",
                "gthread -w 1 --threads 10"}  # fmt: skip
        setups = [s for s in setups if s.config in keep]
    return setups


def _processes(cores: int, quick: bool) -> list[Setup]:
    counts = [1, cores] if quick else list(range(1, 2 * cores + 1))
    return [uwsgi("uwsgi-processes.ini", f"-p {n}", "blocking", n, serves=CPU) for n in counts] + [
        gunicorn("gunicorn-sync.conf.py", f"sync -w {n}", "blocking", n, serves=CPU) for n in counts
    ]


def _grid(cores: int, quick: bool) -> list[Setup]:
    processes = [1, cores]
    threads = [1, 4] if quick else [1, 4, 10]
    return [
        uwsgi("uwsgi-threads.ini", f"-p {p} --threads {t}", "threading" if t > 1 else "blocking", p, t, serves=BOTH)
        for p in processes
        for t in threads
    ]


def _coroutines(cores: int, quick: bool) -> list[Setup]:
    return [
        uwsgi("uwsgi-gevent.ini", "-p 1 --gevent 1000", "async", 1, serves=IO),
        lab("/async", "/async", "async", serves=IO),
        uwsgi("uwsgi-threads.ini", "-p 1 --threads 10", "threading", 1, 10, serves=IO),
        gunicorn("gunicorn-gthread.conf.py", "gthread -w 1 --threads 10", "threading", 1, 10, serves=IO),
    ]


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


def _side_by_side_findings(rows: list[dict[str, Any]]) -> list[str]:
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


def _processes_findings(rows: list[dict[str, Any]]) -> list[str]:
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


def _grid_findings(rows: list[dict[str, Any]]) -> list[str]:
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


def _coroutine_findings(rows: list[dict[str, Any]]) -> list[str]:
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


PRESETS = {
    preset.name: preset
    for preset in (
        Preset(
            "default",
            "Which server, which model? The lab's modes, uWSGI and gunicorn on the same burst.",
            _side_by_side,
            lambda quick: [_count(quick)] if quick else [_count(quick), _waits(quick)],
            _side_by_side_findings,
        ),
        Preset(
            "processes",
            "Do multiple processes use multiple cores? (processes 1 to 2 x cores, CPU-bound)",
            _processes,
            lambda quick: [_count(quick)],
            _processes_findings,
        ),
        Preset(
            "grid",
            "Processes x threads, for CPU-bound and I/O-bound work: which setting?",
            _grid,
            lambda quick: [_count(quick), _waits(quick)],
            _grid_findings,
        ),
        Preset(
            "coroutines",
            "Coroutines for I/O: uWSGI+gevent and the lab's /async against a slow upstream.",
            _coroutines,
            lambda quick: [_waits(quick, 10), _waits(quick, 50 if quick else 200)],
            _coroutine_findings,
        ),
    )
}


# ---------- measuring ----------


@dataclass
class Run:
    args: argparse.Namespace
    out: Path
    rows: list[dict[str, Any]] = field(default_factory=list)
    workers: list[dict[str, Any]] = field(default_factory=list)
    failed: list[str] = field(default_factory=list)  # configurations that could not be measured, and why


def measure(run: Run, server: Running, load: Load) -> dict[str, Any]:
    """One load on one running server: the race, then siege; one row."""
    setup = server.setup
    url = setup.url(server.url, load.workload, load.params)
    facts = None if setup.server == "lab" else setup.facts(_listed(server.url))
    # The burst alone, from the race's start event to its end: not its warm-up and solo requests.
    watcher = server.watch()
    view = WorkerView(server.stats_socket) if server.stats_socket else None
    meters = [m for m in (watcher, view) if m is not None]

    answered = 0

    def on_event(event: Event) -> None:
        nonlocal answered
        if event["event"] == "race":
            for meter in meters:
                meter.start()
        elif event["event"] == "response":
            answered += 1
            if answered == load.concurrency:  # the burst is over (solo runs may follow)
                for meter in meters:
                    meter.stop()
        _progress(event)

    quick = run.args.quick
    try:
        summary, responses, pings = race(server.url, setup.mode, load.workload, load.params, load.concurrency,
                                         url=url, server=facts, warmup_s=0 if quick else 2,
                                         solo_runs=1 if quick else 3, solo_after=True, on_event=on_event)  # fmt: skip
    finally:
        for meter in meters:
            meter.stop()
    peaks = watcher.peaks
    ok = [r.body for r in responses if r.status == 200 and isinstance(r.body, dict)]
    row: dict[str, Any] = {
        "server": setup.server,
        "config": setup.config,
        "workload": load.workload,
        "params": load.params,
        "endpoint": url.removeprefix(server.url).split("?")[0],
        "concurrency": load.concurrency,
        "elapsed_s": summary.elapsed_s,
        "mean_s": summary.mean_s,
        "ideal_s": summary.ideal_s,
        "ratio": summary.ratio,
        "ping_p50_ms": summary.ping_p50_ms,
        "ping_max_ms": summary.ping_max_ms,
        # Where the work ran: requests per process that ran them (a worker process, or the server itself).
        "spread": {str(pid): n for pid, n in Counter(body["worker"]["pid"] for body in ok).most_common()},
        "threads_used": len({(body["worker"]["pid"], body["worker"]["thread"]) for body in ok}),
        "peak_processes": peaks.processes,
        "peak_threads": peaks.threads,
        "rss_mb": peaks.rss_mb,
        "solo_s": summary.solo_s,
        "failed": summary.failed,
        "reachable_ratio": summary.reachable_ratio,
        "cpu_share": summary.cpu_share,
        "mode_model": setup.mode,
        # A peer's own counts, as configured (the lab's depend on its flags: see spread and peak_processes).
        "processes": None if setup.server == "lab" else setup.processes,
        "threads": None if setup.server == "lab" else setup.threads,
    }
    number = len(run.rows)
    (run.out / f"race-{number}.json").write_text(json.dumps(
        {"row": row, "summary": asdict(summary), "responses": [asdict(r) for r in responses],
         "pings": [asdict(p) for p in pings]}, indent=1) + "\n")  # fmt: skip
    if view is not None:
        run.workers.append({"row": number, "server": setup.server, "config": setup.config,
                            "workload": load.workload, "workers": view.rows()})  # fmt: skip
    if not run.args.no_siege:
        row.update(_siege(url, load.concurrency, run.out / f"siege-{number}"))
    return row


def _listed(base: str) -> list[dict[str, Any]]:
    status, body, _, _ = get(f"{base}/workloads", 30)
    if status != 200 or not isinstance(body, list):
        raise RuntimeError(f"{base}/workloads answered {status}")
    return body


def _siege(url: str, concurrency: int, stem: Path) -> dict[str, Any]:
    """The same burst from siege (with the lab's own rc file): its elapsed, mean and failures."""
    rc = stem.with_suffix(".siegerc")
    rc.write_text(SIEGERC)
    done = subprocess.run(["siege", "-R", str(rc), "--json-output", "--no-parser", "--benchmark", "-c",
                           str(concurrency), "-r", "1", url], capture_output=True, text=True, timeout=900,
                          check=False)  # fmt: skip
    stem.with_suffix(".json").write_text(done.stdout)
    siege = parse_siege(done.stdout)
    return {
        "siege_elapsed_s": float(siege["elapsed_time"]),
        "siege_mean_s": float(siege["response_time"]),
        "siege_failed": int(siege.get("failed_transactions", 0)),
    }


def _progress(event: Event) -> None:
    if event["event"] == "done":
        s = event["summary"]
        print(f"  {s['concurrency']} requests: {s['elapsed_s']:.2f} s, ratio {s['ratio']:.2f}", file=sys.stderr)


def run_preset(preset: Preset, run: Run) -> None:
    """Every configuration of `preset` in turn, its rows appended to `run` as they are measured.

    One configuration that fails to start or to finish its loads is reported in `run.failed` and the run goes
    on; one that leaves processes behind stops the run (the next would be measured beside them).
    """
    cores = cpu_count()
    loads = preset.loads(run.args.quick)
    upstream = EmbeddedUpstream.start()
    try:
        for setup in preset.setups(cores, run.args.quick):
            mine = [load for load in loads if load.kind in setup.serves]
            if not mine:
                continue
            name = f"{setup.server} {setup.config}"
            print(f"{name}: starting", file=sys.stderr)
            try:
                server = Running.start(setup, run.out, upstream.url)
            except ServerError as error:
                run.failed.append(f"{name}: {error}")
                print(f"error: {name}: {error}", file=sys.stderr)
                continue
            try:
                for load in mine:
                    run.rows.append(measure(run, server, load))
            except (RuntimeError, OSError, subprocess.SubprocessError) as error:
                run.failed.append(f"{name}: {error}")
                print(f"error: {name}: {error}", file=sys.stderr)
            finally:
                left = server.stop()
            if left:
                raise RuntimeError(f"{name} left processes behind: {left}")
    finally:
        upstream.stop()


def write(run: Run, preset: Preset) -> list[Path]:
    out = run.out
    findings = preset.findings(run.rows)
    (out / "compare.json").write_text(json.dumps(run.rows, indent=1) + "\n")
    (out / "findings.json").write_text(json.dumps(
        {"preset": preset.name, "question": preset.question, "quick": run.args.quick, "findings": findings,
         "not_measured": run.failed,
         "workers": run.workers, "machine": machine_facts(None)}, indent=1) + "\n")  # fmt: skip
    lines = [f"# {preset.question}", "", markdown_table(run.rows, COLUMNS), "", "## Findings", ""]
    lines += [f"- {finding}" for finding in findings]
    if run.failed:
        lines += ["", "## Not measured", "", *(f"- {failure.splitlines()[0]}" for failure in run.failed)]
    lines += ["", "## Workers during the burst", "",
              "uWSGI's as uwsgitop shows them (its stats socket: requests served, the burst's and the /ping "
              "probes', and the share of the burst each worker's cores spent in requests: uwsgitop's REQ and "
              "RunT); the lab's from the envelopes.", ""]  # fmt: skip
    for view in run.workers:
        per = ", ".join(f"worker {w['worker']} (pid {w['pid']}): {w['requests']} requests, busy "
                        f"{round(100 * (w['busy'] or 0))}%" for w in view["workers"])  # fmt: skip
        lines.append(f"- {view['server']} {view['config']}, {view['workload']}: {per}")
    for row in run.rows:
        if row["server"] == "lab":
            lines.append(f"- lab {row['config']}, {row['workload']}: work ran in {len(row['spread'])} process(es), "
                         f"{_spread(row)} requests")  # fmt: skip
    (out / "compare.md").write_text("\n".join(lines) + "\n")
    return [out / "compare.json", out / "findings.json", out / "compare.md", charts.compare(out / "compare.png",
                                                                                            run.rows)]  # fmt: skip


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="python -m bench.compare", description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument(
        "--preset", choices=list(PRESETS), default="default", help="what to compare (default: %(default)s)"
    )
    parser.add_argument("--quick", action="store_true", help="small workloads and fewer configurations: a short run")
    parser.add_argument("--no-siege", action="store_true", help="the Python race only (siege is not installed)")
    parser.add_argument("--out", type=Path, metavar="DIR", help="folder for the results (default: a new one)")
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    if not args.no_siege and shutil.which("siege") is None:
        print("error: siege is not installed: sudo apt-get install siege (make compare installs it), or pass "
              "--no-siege", file=sys.stderr)  # fmt: skip
        return 2
    missing = [tool for tool in ("uwsgi", "gunicorn") if not (BIN / tool).exists()]
    if missing:
        print(f"error: {' and '.join(missing)} not installed in this environment: make peers", file=sys.stderr)
        return 2
    stop_on_sigterm()
    preset = PRESETS[args.preset]
    out = args.out or new_results_dir("compare-")
    out.mkdir(parents=True, exist_ok=True)
    print(f"{preset.question}\nresults: {out}", file=sys.stderr)
    run = Run(args, out)
    status = 0
    try:
        run_preset(preset, run)
    except (RuntimeError, OSError) as error:
        print(f"error: {error}", file=sys.stderr)
        status = 1
    except KeyboardInterrupt:
        print("\ninterrupted", file=sys.stderr)
        status = 130
    if run.failed:
        status = status or 1
    if not run.rows:
        return status or 1
    # Whatever was measured is kept, and says what it lacks: minutes of measuring are not thrown away.
    written = write(run, preset)
    print(text_table(run.rows, COLUMNS))
    print()
    for finding in preset.findings(run.rows):
        print(f"- {finding}")
    for failure in run.failed:
        print(f"- not measured: {failure.splitlines()[0]}")
    for path in written:
        print(f"wrote {path}")
    return status


if __name__ == "__main__":
    sys.exit(main())
