"""The servers people choose between, side by side: the lab's modes, uWSGI and gunicorn, on the same workloads.

    make compare                                   # the default comparison, about 5 minutes on 2 cores
    python -m bench.compare --preset processes     # do multiple processes use multiple cores?
    python -m bench.compare --preset grid          # processes x threads, for CPU-bound and I/O-bound work
    python -m bench.compare --preset coroutines    # uWSGI+gevent and the lab's /async, 10 and 200 waiting
    python -m bench.compare --quick                # small workloads, fewer configurations (2 per server)

Every configuration is started in turn, as a user starts it (bench/lib/peers.py:
`server.py`, `uwsgi --ini peers/...`, `gunicorn -c peers/...`), and given the
same loads by the same clients: the Python race (lab/race/engine.py: requests
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
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

if __package__ in (None, ""):  # run as `python bench/compare.py`: make the `bench` package importable
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.charts import figures as charts
from bench.lib import rounds
from bench.lib.args import OUT, ROUNDS
from bench.lib.command import new_parser, run_command
from bench.lib.peers import BIN, Running, WorkerView
from bench.lib.presets import PRESETS, Load, Preset
from bench.lib.results import machine_facts, new_results_dir
from bench.lib.servers import Peaks, ServerError
from bench.lib.siege import SIEGERC, parse_siege
from bench.lib.tables import Column, columns, markdown_table, spread_text, text_table
from lab.machine import cpu_count
from lab.modes.upstream.embedded import EmbeddedUpstream
from lab.race.data import Event, RaceSpec, Response, Summary, spread_of
from lab.race.engine import get, race

# The keys every row of compare.json carries (README, "Peers").
ROW_KEYS = ("server", "config", "workload", "endpoint", "concurrency", "elapsed_s", "mean_s", "ideal_s", "ratio",
            "cpu_ideal_s", "cpu_ratio", "ping_p50_ms", "ping_max_ms", "spread", "peak_processes", "peak_threads",
            "rss_mb", "round")  # fmt: skip

COLUMNS = columns(
    "server", "config", "workload", Column("concurrency", "c", "{:d}"), "elapsed_s", "mean_s", "ideal_s", "ratio",
    "cpu_ratio", Column("reachable_ratio", "reach"), Column("ping_max_ms", "worst /ping ms", "{:.0f}"), "spread",
    Column("peak_processes", "procs", "{:d}"), "peak_threads", Column("rss_mb", "RSS MB", "{:.0f}"),
    Column("siege_elapsed_s", "siege s"),
)  # fmt: skip


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
    quick = run.args.quick
    url = setup.url(server.url, load.workload, load.params)
    spec = RaceSpec(server.url, setup.mode, load.workload, load.params, load.concurrency, solo_runs=1 if quick else 3,
                    solo_after=True, warmup_s=0 if quick else 2, url=url,
                    server=None if setup.server == "lab" else setup.facts(_listed(server.url)))  # fmt: skip
    meters = BurstMeters(server, load.concurrency)
    try:
        summary, responses, pings = race(spec, meters.on_event)
    finally:
        meters.stop()
    row = _row(server, load, url, summary, responses, peaks=meters.watcher.peaks)
    number = len(run.rows)
    (run.out / f"race-{number}.json").write_text(json.dumps(
        {"row": row, "summary": asdict(summary), "responses": [asdict(r) for r in responses],
         "pings": [asdict(p) for p in pings]}, indent=1) + "\n")  # fmt: skip
    if meters.view is not None:
        run.workers.append({"row": number, "server": setup.server, "config": setup.config,
                            "workload": load.workload, "workers": meters.view.rows()})  # fmt: skip
    if not run.args.no_siege:
        row.update(_siege(url, load.concurrency, run.out / f"siege-{number}"))
    return row


class BurstMeters:
    """What is sampled during the burst alone, from the race's start event to its last answer (not its warm-up
    and solo requests): the server's peak processes, threads and RSS, and uWSGI's per-worker view."""

    def __init__(self, server: Running, concurrency: int) -> None:
        self.watcher = server.watch()
        self.view = WorkerView(server.stats_socket) if server.stats_socket else None
        self.meters = [m for m in (self.watcher, self.view) if m is not None]
        self.concurrency = concurrency
        self.answered = 0

    def on_event(self, event: Event) -> None:
        if event["event"] == "race":
            for meter in self.meters:
                meter.start()
        elif event["event"] == "response":
            self.answered += 1
            if self.answered == self.concurrency:  # the burst is over (solo runs may follow)
                self.stop()
        _progress(event)

    def stop(self) -> None:
        for meter in self.meters:
            meter.stop()


def _row(
    server: Running, load: Load, url: str, summary: Summary, responses: list[Response], *, peaks: Peaks
) -> dict[str, Any]:
    """One row of compare.json: the configuration, the load, the race's numbers, the server's peaks."""
    setup = server.setup
    ok = [r.body for r in responses if r.status == 200 and isinstance(r.body, dict)]
    peer = setup.server != "lab"
    return {
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
        "cpu_ideal_s": summary.cpu_ideal_s,
        "cpu_ratio": summary.cpu_ratio,
        "ping_p50_ms": summary.ping_p50_ms,
        "ping_max_ms": summary.ping_max_ms,
        # Where the work ran: requests per process that ran them (a worker process, or the server itself).
        "spread": spread_of([body["worker"]["pid"] for body in ok]),
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
        "processes": setup.processes if peer else None,
        "threads": setup.threads if peer else None,
    }


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
    setups = preset.setups(cores, run.args.quick)
    try:
        # With --rounds, every configuration once per round, in turn: a slow minute falls on all alike.
        for number, setup in rounds.schedule(setups, run.args.rounds):
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
                    run.rows.append({**measure(run, server, load), "round": number})
            except (RuntimeError, OSError, subprocess.SubprocessError) as error:
                run.failed.append(f"{name}: {error}")
                print(f"error: {name}: {error}", file=sys.stderr)
            finally:
                left = server.stop()
            if left:
                raise RuntimeError(f"{name} left processes behind: {left}")
    finally:
        upstream.stop()


def median_rounds(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Per configuration and load, the row of its median round (by makespan): one row each, as one round gives."""
    groups: dict[str, list[dict[str, Any]]] = {}
    for row in rows:
        groups.setdefault(_group(row), []).append(row)
    return [sorted(group, key=lambda r: r["elapsed_s"])[(len(group) - 1) // 2] for group in groups.values()]


def _group(row: dict[str, Any]) -> str:
    return f"{row['server']} {row['config']} {row['workload']} c={row['concurrency']}"


def write(run: Run, preset: Preset) -> list[Path]:
    out = run.out
    findings = preset.findings(median_rounds(run.rows))
    (out / "compare.json").write_text(json.dumps(run.rows, indent=1) + "\n")
    (out / "findings.json").write_text(json.dumps(
        {"preset": preset.name, "question": preset.question, "quick": run.args.quick, "findings": findings,
         "not_measured": run.failed,
         "workers": run.workers, "machine": machine_facts(None)}, indent=1) + "\n")  # fmt: skip
    lines = [f"# {preset.question}", "", markdown_table(run.rows, COLUMNS), *rounds_lines(run.rows), "",
             "## Findings", ""]  # fmt: skip
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
                         f"{spread_text(row['spread'])} requests")  # fmt: skip
    (out / "compare.md").write_text("\n".join(lines) + "\n")
    return [out / "compare.json", out / "findings.json", out / "compare.md", charts.compare(out / "compare.png",
                                                                                            run.rows)]  # fmt: skip


def rounds_lines(rows: list[dict[str, Any]]) -> list[str]:
    """With rounds, their medians and ranges (the findings read each configuration's median round)."""
    if max((row["round"] for row in rows), default=1) < 2:
        return []
    summary = rounds.summarise([{**row, "group": _group(row)} for row in rows], group="group")
    return ["", "## Over the rounds", "", "```", rounds.table(summary, group="group"), "```"]


def build_parser() -> argparse.ArgumentParser:
    parser = new_parser("bench.compare", __doc__)
    parser.add_argument(
        "--preset", choices=list(PRESETS), default="default", help="what to compare (default: %(default)s)"
    )
    parser.add_argument("--quick", action="store_true", help="small workloads and fewer configurations: a short run")
    parser.add_argument("--no-siege", action="store_true", help="the Python race only (siege is not installed)")
    ROUNDS.add(
        parser,
        default=1,
        help="measure every configuration N times, in turn, and print the medians and ranges; the findings "
        "read each configuration's median round (default: 1)",
    )
    OUT.add(parser, help="folder for the results (default: a new one)")
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
    preset = PRESETS[args.preset]
    out = args.out or new_results_dir("compare-")
    out.mkdir(parents=True, exist_ok=True)
    print(f"{preset.question}\nresults: {out}", file=sys.stderr)
    run = Run(args, out)
    status = run_command(lambda: run_preset(preset, run))
    if run.failed:
        status = status or 1
    if not run.rows:
        return status or 1
    # Whatever was measured is kept, and says what it lacks: minutes of measuring are not thrown away.
    written = write(run, preset)
    print(text_table(run.rows, COLUMNS))
    print("\n".join(rounds_lines(run.rows)[3:-1]))
    print()
    for finding in preset.findings(median_rounds(run.rows)):
        print(f"- {finding}")
    for failure in run.failed:
        print(f"- not measured: {failure.splitlines()[0]}")
    for path in written:
        print(f"wrote {path}")
    return status


if __name__ == "__main__":
    sys.exit(main())
