"""Fire N concurrent requests at one mode of a lab server and record what happened (the race's command line).

    python -m bench.race --url http://127.0.0.1:8000 --mode processing --workload count -c 10
    python bench/race.py --all -c 10          # every mode, on a server it starts itself

The race itself is lab/race/engine.py: every request released at the same
instant on its own connection, /ping probed meanwhile, solo requests first
to time the single run `t` the ideal is computed from (lab/race/ideal.py).

Prints a table (elapsed, mean/shortest/longest, ideal, ratio, the ratio to the
ideal from the burst's own CPU time, ping p50/p99/max, where the runs' time went)
and writes race.json plus a PNG timeline per mode under bench/results/.

With --jsonl the race is streamed as JSON lines on stdout (the lab page's
race driver reads them); see EVENTS in lab/race/engine.py. Nothing else goes to
stdout then, and no files are written unless --out is given.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Callable, Sequence
from dataclasses import asdict
from pathlib import Path
from typing import Any, TextIO

if __package__ in (None, ""):  # run as `python bench/race.py`: make the `bench` package importable
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.charts import figures as charts
from bench.lib import rounds
from bench.lib.args import (
    CONCURRENCY,
    NO_FILES,
    OUT,
    PARAM,
    REPS,
    ROUNDS,
    SERVER_ARGS,
    SOLO_RUNS,
    URL,
    WARMUP,
    WORKLOAD,
)
from bench.lib.command import check_ranges, new_parser, run_command
from bench.lib.results import new_results_dir
from bench.lib.servers import lab_server
from bench.lib.tables import COLUMNS, INSTRUMENT_COLUMNS, PING_COLUMNS, SPREAD_COLUMN, text_table
from lab.modes.registry import MODES
from lab.race.data import Event, RaceSpec
from lab.race.engine import race, server_modes


class Progress:
    """A tick on stderr per finished request ('.' ok, 'x' failed), one line per race."""

    def __init__(self, stream: TextIO = sys.stderr) -> None:
        self.stream = stream
        self.done = 0

    def __call__(self, event: Event) -> None:
        kind = event["event"]
        if kind == "race":
            self.done = 0
            total = event["concurrency"] * event.get("reps", 1)
            self._write(f"{event['mode']:<10} solo {event['solo_s']:.2f} s, {total} requests ")
        elif kind == "response":
            self.done += 1
            self._write("." if event["status"] == 200 else "x")
        elif kind == "done":
            s = event["summary"]
            total = s["concurrency"] * s.get("reps", 1)
            own = "" if s.get("cpu_ratio") is None else f", cpu ratio {s['cpu_ratio']:.2f}"
            self._write(f" {self.done}/{total} in {s['elapsed_s']:.2f} s (ratio {s['ratio']:.2f}{own})\n")

    def _write(self, text: str) -> None:
        self.stream.write(text)
        self.stream.flush()


def build_parser() -> argparse.ArgumentParser:
    parser = new_parser("bench.race", __doc__)
    URL.add(parser)
    parser.add_argument(
        "--mode",
        type=_mode_list,
        default=["processing"],
        metavar="MODE[,MODE...]",
        help=f"the mode to race, or several in turn ({', '.join(MODES)}; default: processing)",
    )
    parser.add_argument("--all", action="store_true", help="race every mode, one after another")
    ROUNDS.add(
        parser,
        default=1,
        help="race every mode N times, in turn (A, B, then A, B again), and print each figure's median and "
        "range; warns when t ranged over more than 15%% of its median (default: 1)",
    )
    WORKLOAD.add(parser, help="workload name (async runs its own upstream call, unless it awaits the workload: mix)")
    PARAM.add(parser, help="workload (or, with --mode async, async) param, repeatable: -p n=5000000")
    parser.add_argument("--delay", type=float, metavar="S", help="/async upstream delay (default: the server's, 1 s)")
    CONCURRENCY.add(parser, help="simultaneous requests (default: 10)")
    REPS.add(parser, help="requests per client, one after another (default: 1)")
    parser.add_argument("--ping-every", type=float, default=0.005, metavar="S", help="probe interval (default: 0.005)")
    parser.add_argument(
        "--ping-batch",
        type=float,
        default=0.1,
        metavar="S",
        help="--jsonl reports the probes as one 'pings' event per S seconds; 0: a 'ping' event per probe "
        "(default: 0.1). race.json keeps every probe either way",
    )
    parser.add_argument(
        "--no-capacity",
        action="store_true",
        help="skip measuring this machine's parallel capacity (about a second before each race whose runs "
        "can go at once), and with it the ideal it can reach",
    )
    SOLO_RUNS.add(parser, help="solo requests whose median is the single-run time t (default: 3)")
    WARMUP.add(
        parser,
        default=0.0,
        help="before the solo runs, load the endpoint for S seconds with as many requests at once as can run (one per "
        "core at most) (default: 0)",
    )
    parser.add_argument("--jsonl", action="store_true", help="stream events as JSON lines on stdout")
    OUT.add(parser, help="folder for race.json and timeline PNGs (default: bench/results/race-<stamp>/)")
    NO_FILES.add(parser)
    parser.add_argument("--quiet", action="store_true", help="no progress ticks on stderr")
    SERVER_ARGS.add(parser, help="flags for the server started when --url is not given, e.g. '--processes 0'")
    return parser


def _mode_list(text: str) -> list[str]:
    modes = [name.strip() for name in text.split(",") if name.strip()]
    unknown = [name for name in modes if name not in MODES]
    if unknown or not modes:
        raise argparse.ArgumentTypeError(f"unknown mode {', '.join(unknown) or repr(text)}; modes: {', '.join(MODES)}")
    return modes


def race_params(args: argparse.Namespace, mode: str) -> dict[str, str]:
    """-p params go to the workload (/async/mix too); /async takes --delay (or -p when it is the only mode)."""
    if MODES[mode].runs(args.workload):
        return dict(args.param)
    params = dict(args.param) if not args.all else {}
    if args.delay is not None:
        params["delay"] = repr(args.delay)
    return params


def _modes(args: argparse.Namespace, base: str) -> list[str]:
    """--all: every mode the server can run the workload in (the others named on stderr); else --mode's."""
    if not args.all:
        return list(args.mode)
    runnable, skipped = server_modes(base, args.workload, timeout=30.0)
    for why in skipped:
        print(f"skipping {why}", file=sys.stderr)
    return runnable


def run_races(args: argparse.Namespace, base: str, on_event: Callable[[Event], None] | None) -> list[dict[str, Any]]:
    """Every requested race, in order, round after round; each as {"round", "summary", "responses", "pings"}."""
    results = []
    for number, mode in rounds.schedule(_modes(args, base), args.rounds):
        spec = RaceSpec(base, mode, args.workload, race_params(args, mode), args.concurrency, reps=args.reps,
                        solo_runs=args.solo_runs, warmup_s=args.warmup, measure_capacity=not args.no_capacity,
                        ping_every=args.ping_every, ping_batch=args.ping_batch)  # fmt: skip
        summary, responses, pings = race(spec, on_event)
        results.append({"round": number, "summary": summary, "responses": responses, "pings": pings})
    return results


def write_files(out: Path, base: str, results: list[dict[str, Any]]) -> list[Path]:
    """race.json (everything measured) and one timeline PNG per race; the paths written."""
    out.mkdir(parents=True, exist_ok=True)
    doc: list[dict[str, Any]] = [
        {
            "round": r["round"],
            "summary": asdict(r["summary"]),
            "responses": [asdict(x) for x in r["responses"]],
            "pings": [asdict(p) for p in r["pings"]],
        }
        for r in results
    ]
    data = out / "race.json"
    several = any(r["round"] > 1 for r in results)
    # The order the races ran in, and with rounds each mode's medians and ranges.
    order = [r["summary"].mode for r in results]
    extra = {"rounds": rounds.summarise(_rows(results))} if several else {}
    data.write_text(json.dumps({"url": base, "order": order, "races": doc, **extra}, indent=1) + "\n")
    written = [data]
    for race_doc in doc:
        suffix = f"-{race_doc['round']}" if several else ""
        drawn = {key: value for key, value in race_doc.items() if key != "round"}
        written.append(charts.timeline(out / f"timeline-{race_doc['summary']['mode']}{suffix}.png", **drawn))
    return written


def _rows(results: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Each race's summary as a table row, its endpoint its mode."""
    return [{"endpoint": r["summary"].mode, "round": r["round"], **asdict(r["summary"])} for r in results]


def parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    parser = build_parser()
    args = parser.parse_args(argv)
    check_ranges(
        parser,
        ("-c", args.concurrency, 1, 200),
        ("-r", args.reps, 1, 100),
        ("--solo-runs", args.solo_runs, 1, 20),
        ("--rounds", args.rounds, 1, 20),
    )
    return args


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_args(argv)
    on_event = _stream if args.jsonl else None if args.quiet else Progress()
    on_error = (lambda message: _stream({"event": "error", "message": message})) if args.jsonl else None
    return run_command(lambda: _run(args, on_event), on_error=on_error)


def _stream(event: Event) -> None:
    sys.stdout.write(json.dumps(event) + "\n")
    sys.stdout.flush()


def _run(args: argparse.Namespace, on_event: Callable[[Event], None] | None) -> None:
    """The races, on --url's server or one started for them; then the table and the files."""
    with lab_server(args.url, args.server_args, "race-server-", quiet=args.jsonl) as base:
        results = run_races(args, base, on_event)
    if not args.jsonl or args.out is not None:
        report(args, args.url or base, results)


def report(args: argparse.Namespace, base: str, results: list[dict[str, Any]]) -> None:
    """The table, and the files with their paths (on stderr with --jsonl: stdout carries JSON lines only)."""
    out = sys.stderr if args.jsonl else sys.stdout
    summaries = _rows(results)
    print(text_table(summaries, (*COLUMNS, SPREAD_COLUMN, *PING_COLUMNS, *INSTRUMENT_COLUMNS)), file=out)
    if any(r["round"] > 1 for r in results):
        print(f"\nover {args.rounds} rounds, in turn:\n{rounds.table(rounds.summarise(summaries))}", file=out)
    if not args.no_files:
        for path in write_files(args.out or new_results_dir("race-"), base, results):
            print(f"wrote {path}", file=out)


if __name__ == "__main__":
    sys.exit(main())
