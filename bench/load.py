"""Load as users bring it: Locust users against one lab route, headless, with the server watched meanwhile.

    python -m bench.load                                   # the seed: 15 users until 300 requests, /threading
    python -m bench.load --path '/processing/count?n=20000000'
    python -m bench.load --url http://127.0.0.1:8000 --users 50 --rate 1 --requests 0 --seconds 60
    python -m bench.load --ui                              # Locust's web UI on 127.0.0.1:8089 (make locust)

The seed is the uWSGI tuning write-up's experiment: 15 simulated users, each
sending its next request as soon as the last is answered, until 300 requests,
a table every 3 s (reqs, fails, avg, min, max, median, req/s), with vmstat
beside it on the server. Here the second table samples the same seconds
from /proc (the run queue; CPU user, system, idle and steal, in % of all
cores) and the lab's /stats (how many jobs each pool of the route's mode is
running and queueing). `--rate R` paces each user to R requests/s instead:
users x R requests/s are offered while the answers come faster than 1/R.
`--arrivals R` offers R requests/s from all users together, evenly spaced,
whether or not the server keeps up (the open model; bench.knee steps it).
`--ui` opens Locust's web UI instead, on loopback, against --url or a
server of its own, until Ctrl-C.

Writes to bench/results/load-<stamp>/ (or --out): Locust's CSVs (locust_stats,
locust_stats_history, locust_failures, locust_exceptions), its output
(locust_locust.log), every answer (locust_answers.csv: when it was sent,
ms, HTTP status), load.json (both tables) and load.png (req/s, median and 95th percentile latency, failures,
users, and the server's CPU and run queue over time). Needs Locust
(make locust installs it).
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
from collections.abc import Sequence
from dataclasses import replace
from pathlib import Path

if __package__ in (None, ""):  # run as `python bench/load.py`: make the `bench` package importable
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.charts import load as load_charts
from bench.lib import locust
from bench.lib.args import EVERY, OUT, SERVER_ARGS, URL, USERS
from bench.lib.command import check_ranges, new_parser, run_command
from bench.lib.optional import need_module
from bench.lib.results import new_results_dir
from bench.lib.servers import lab_server


def build_parser() -> argparse.ArgumentParser:
    parser = new_parser("bench.load", __doc__)
    URL.add(parser)
    parser.add_argument("--path", default="/threading/count?n=20000000", help="the route (several: comma-separated)")
    USERS.add(parser)
    parser.add_argument("--spawn-rate", type=float, default=0, help="users started per second (default: all at once)")
    parser.add_argument("--requests", type=int, default=300, help="stop after this many answers; 0: --seconds only")
    parser.add_argument("--rate", type=float, default=0.0, help="requests/s per user (default 0: back to back)")
    parser.add_argument("--arrivals", type=float, default=0.0, help="requests/s from all users together, evenly "
                        "spaced (the open model; default 0: each user at its own pace)")  # fmt: skip
    parser.add_argument("--seconds", type=int, default=300, help="stop after this long at most (default: 300)")
    EVERY.add(parser)
    parser.add_argument("--ui", action="store_true", help="open Locust's web UI instead (loopback), until Ctrl-C")
    parser.add_argument("--web-port", type=int, default=8089, help="the UI's port with --ui (default: 8089)")
    OUT.add(parser, help="results folder (default: bench/results/load-<stamp>/)")
    SERVER_ARGS.add(parser, help="flags for the server started when --url is not given")
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    check_ranges(parser, ("--users", args.users, 1, 10_000), ("--seconds", args.seconds, 1, 86_400))
    need_module("locust", "Locust", locust.INSTALL, tool="bench.load")
    return run_command(lambda: _ui(args) if args.ui else _run(args))


def _crowd(args: argparse.Namespace) -> locust.Crowd:
    return locust.Crowd(args.users, args.spawn_rate, args.requests, args.rate, args.arrivals, args.seconds)


def _ui(args: argparse.Namespace) -> None:
    """Locust's web UI on 127.0.0.1 against --url or a server of this run's own; the form starts with our flags."""
    with lab_server(args.url, args.server_args, "load-server-") as base:
        crowd = replace(_crowd(args), requests=0)  # a UI run goes on until its Stop button
        command = [arg for arg in locust.locust_command(crowd, args.path, base, Path("-")) if arg != "--headless"]
        # The UI's own runs: no CSV, no --run-time, no summary-only, no answers log (it would grow without end).
        keep = [*command[: command.index("--lab-log")], "--web-host", "127.0.0.1", "--web-port", str(args.web_port)]
        print(f"Locust's UI: http://127.0.0.1:{args.web_port} (against {base}; Ctrl-C stops it)", file=sys.stderr)
        subprocess.run(keep, check=False)


def _run(args: argparse.Namespace) -> None:
    out = args.out or new_results_dir("load-")
    out.mkdir(parents=True, exist_ok=True)
    crowd = _crowd(args)
    with lab_server(args.url, args.server_args, "load-server-") as base:
        pace = f" at {args.rate:g} req/s each" if args.rate else ""
        pace += f", {args.arrivals:g} req/s together" if args.arrivals else ""
        print(f"{args.users} users on {base}{args.path}{pace}", file=sys.stderr)
        pool = locust.lab_pool(base, locust.mode_of(args.path))
        doc = locust.measure(base, args.path, crowd, out / "locust", every=args.every, pool=pool)
    (out / "load.json").write_text(json.dumps({"path": args.path, "users": args.users, "rate": args.rate,
                                               "arrivals": args.arrivals, "requests": args.requests, **doc},
                                              indent=1) + "\n")  # fmt: skip
    print(locust.text(doc["locust"], locust.SEED_COLUMNS))
    print()
    print(locust.text(doc["host"], locust.HOST_COLUMNS))
    chart = load_charts.timeline(out / "load.png", doc["locust"], doc["host"])
    print(f"wrote {out / 'load.json'}\nwrote {chart}")


if __name__ == "__main__":
    sys.exit(main())
