"""Fire N concurrent requests at one mode of a lab server and record what happened (the race's command line).

    python -m bench.race --url http://127.0.0.1:8000 --mode processing --workload count -c 10
    python bench/race.py --all -c 10          # every mode, on a server it starts itself

The race itself is bench/engine.py: every request released at the same
instant on its own connection, /ping probed meanwhile, solo requests first
to time the single run `t` the ideal is computed from (bench/ideal.py).

Prints a table (elapsed, mean/shortest/longest, ideal, ratio, ping p50/p99/max)
and writes race.json plus a PNG timeline per mode under bench/results/.

With --jsonl the race is streamed as JSON lines on stdout (the lab page's
race driver reads them); see EVENTS in bench/engine.py. Nothing else goes to
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

from bench import charts
from bench.args import param_pair, stop_on_sigterm
from bench.engine import Event, race
from bench.servers import own_server
from bench.summary import COLUMNS, INSTRUMENT_COLUMNS, PING_COLUMNS, SPREAD_COLUMN, new_results_dir, text_table
from lab.modes import MODES


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
            self._write(f" {self.done}/{total} in {s['elapsed_s']:.2f} s (ratio {s['ratio']:.2f})\n")

    def _write(self, text: str) -> None:
        self.stream.write(text)
        self.stream.flush()


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="python -m bench.race", description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--url", help="base URL of a running lab server (default: start one for this run)")
    parser.add_argument("--mode", choices=list(MODES), default="processing")
    parser.add_argument("--all", action="store_true", help="race every mode, one after another")
    parser.add_argument("--workload", default="count", help="workload name (ignored by modes that run none: async)")
    parser.add_argument(
        "--param",
        "-p",
        action="append",
        type=param_pair,
        default=[],
        metavar="NAME=VALUE",
        help="workload (or, with --mode async, async) param, repeatable: -p n=5000000",
    )
    parser.add_argument("--delay", type=float, metavar="S", help="/async upstream delay (default: the server's, 1 s)")
    parser.add_argument("-c", "--concurrency", type=int, default=10, help="simultaneous requests (default: 10)")
    parser.add_argument("-r", "--reps", type=int, default=1, help="requests per client, one after another (default: 1)")
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
    parser.add_argument(
        "--solo-runs",
        type=int,
        default=3,
        metavar="N",
        help="solo requests whose median is the single-run time t (default: 3)",
    )
    parser.add_argument(
        "--warmup",
        type=float,
        default=0.0,
        metavar="S",
        help="before the solo runs, load the endpoint with one request per core for S seconds (default: 0)",
    )
    parser.add_argument("--jsonl", action="store_true", help="stream events as JSON lines on stdout")
    parser.add_argument(
        "--out",
        type=Path,
        metavar="DIR",
        help="folder for race.json and timeline PNGs (default: bench/results/race-<stamp>/)",
    )
    parser.add_argument("--no-files", action="store_true", help="print the table only")
    parser.add_argument("--quiet", action="store_true", help="no progress ticks on stderr")
    parser.add_argument(
        "--server-args",
        default="",
        metavar="ARGS",
        help="flags for the server started when --url is not given, e.g. '--processes 0'",
    )
    return parser


def race_params(args: argparse.Namespace, mode: str) -> dict[str, str]:
    """-p params go to the workload; /async takes --delay (or -p when it is the only mode)."""
    if MODES[mode].runs_workloads:
        return dict(args.param)
    params = dict(args.param) if not args.all else {}
    if args.delay is not None:
        params["delay"] = repr(args.delay)
    return params


def run_races(args: argparse.Namespace, base: str, on_event: Callable[[Event], None] | None) -> list[dict[str, Any]]:
    """Every requested race, in order; each as {"summary", "responses", "pings"}."""
    results = []
    for mode in list(MODES) if args.all else [args.mode]:
        summary, responses, pings = race(
            base,
            mode,
            args.workload,
            race_params(args, mode),
            args.concurrency,
            ping_every=args.ping_every,
            ping_batch=args.ping_batch,
            measure_capacity=not args.no_capacity,
            solo_runs=args.solo_runs,
            reps=args.reps,
            warmup_s=args.warmup,
            on_event=on_event,
        )
        results.append({"summary": summary, "responses": responses, "pings": pings})
    return results


def write_files(out: Path, base: str, results: list[dict[str, Any]]) -> list[Path]:
    """race.json (everything measured) and one timeline PNG per race; the paths written."""
    out.mkdir(parents=True, exist_ok=True)
    doc: list[dict[str, Any]] = [
        {
            "summary": asdict(r["summary"]),
            "responses": [asdict(x) for x in r["responses"]],
            "pings": [asdict(p) for p in r["pings"]],
        }
        for r in results
    ]
    data = out / "race.json"
    data.write_text(json.dumps({"url": base, "races": doc}, indent=1) + "\n")
    written = [data]
    for race_doc in doc:
        written.append(charts.timeline(out / f"timeline-{race_doc['summary']['mode']}.png", **race_doc))
    return written


def parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    parser = build_parser()
    args = parser.parse_args(argv)
    for name, value, low, high in (("-c", args.concurrency, 1, 200), ("-r", args.reps, 1, 100),
                                   ("--solo-runs", args.solo_runs, 1, 20)):  # fmt: skip
        if not low <= value <= high:
            parser.error(f"{name} must be between {low} and {high}")
    return args


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_args(argv)
    stop_on_sigterm()

    def stream(event: Event) -> None:
        sys.stdout.write(json.dumps(event) + "\n")
        sys.stdout.flush()

    on_event = stream if args.jsonl else None if args.quiet else Progress()
    try:
        if args.url:
            results = run_races(args, args.url.rstrip("/"), on_event)
            base = args.url
        else:
            results, base = _with_own_server(args, on_event)
    except (RuntimeError, OSError) as error:
        if args.jsonl:
            stream({"event": "error", "message": str(error)})
        print(f"error: {error}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        print("\ninterrupted", file=sys.stderr)
        return 130
    if not args.jsonl or args.out is not None:
        report(args, base, results)
    return 0


def report(args: argparse.Namespace, base: str, results: list[dict[str, Any]]) -> None:
    """The table, and the files with their paths (on stderr with --jsonl: stdout carries JSON lines only)."""
    out = sys.stderr if args.jsonl else sys.stdout
    summaries = [{"endpoint": r["summary"].mode, **asdict(r["summary"])} for r in results]
    print(text_table(summaries, (*COLUMNS, SPREAD_COLUMN, *PING_COLUMNS, *INSTRUMENT_COLUMNS)), file=out)
    if not args.no_files:
        for path in write_files(args.out or new_results_dir("race-"), base, results):
            print(f"wrote {path}", file=out)


def _with_own_server(
    args: argparse.Namespace, on_event: Callable[[Event], None] | None
) -> tuple[list[dict[str, Any]], str]:
    """Start a server for this run (stopped however the run ends); the races and its URL."""
    with own_server(args.server_args, "race-server-", quiet=args.jsonl) as server:
        return run_races(args, server.url, on_event), server.url


if __name__ == "__main__":
    sys.exit(main())
