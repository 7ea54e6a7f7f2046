"""The seed experiment on several servers in turn: Locust's 15 users until 300 requests, each server watched.

    python -m bench.seed                                        # /threading, /processing and uWSGI -p 2
    python -m bench.seed --targets '/processing,uwsgi -p 2,gunicorn -w 2' --rounds 3
    python -m bench.seed --n 2000000 --requests 60              # a short run

The uWSGI tuning write-up this lab grew from ran 15 Locust users until 300
requests against uWSGI's processes and threads, a table every 3 s (reqs,
fails, avg, min, max, median, req/s) beside `vmstat` on the server. Here
each target is started as bench.compare starts it (bench/lib/peers.py: the
lab's `server.py`, `uwsgi --ini peers/...`, `gunicorn -c peers/...`) and
given the same users on `count` (n = --n), with bench.load's view of the
host over the same seconds: the run queue, CPU user/system/idle/steal, and
the server's own pool (the lab's /stats; uWSGI's stats socket: busy workers
and its listen queue; gunicorn tells nothing). With --rounds every target
runs once per round, in turn.

Targets: a lab route (`/threading`, `/processing`, `/blocking`,
`/interpreters`...), `uwsgi -p P [--threads T]`, `gunicorn -w W [--threads T]`
(sync; gthread with threads). Writes to bench/results/seed-<stamp>/ (or
--out): per run Locust's CSVs, seed.json (every run's two tables and a
summary row), seed.md (the summary, each run's seed-shaped table, the
findings) and seed.png (throughput, median latency and idle CPU over time).
"""

from __future__ import annotations

import argparse
import json
import re
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

if __package__ in (None, ""):  # run as `python bench/seed.py`: make the `bench` package importable
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.charts import load as load_charts
from bench.lib import rounds
from bench.lib.args import EVERY, OUT, ROUNDS, USERS
from bench.lib.command import check_ranges, new_parser, run_command
from bench.lib.load_findings import seed_findings, summary_row
from bench.lib.locust import HOST_COLUMNS, INSTALL, SEED_COLUMNS, Crowd, PoolReader, lab_pool, measure, text
from bench.lib.optional import need_module
from bench.lib.peers import BIN, Running, Setup, gunicorn, lab, uwsgi, uwsgi_stats
from bench.lib.presets import CPU
from bench.lib.results import new_results_dir
from lab.modes.upstream.embedded import EmbeddedUpstream

DEFAULT_TARGETS = "/threading,/processing,uwsgi -p 2"
SUMMARY_COLUMNS = ("seconds", "reqs", "fails", "avg_ms", "median_ms", "p95_ms", "req_s", "run_queue", "user_pct",
                   "idle_pct", "pool_running", "pool_waiting")  # fmt: skip
PEER = re.compile(r"(uwsgi -p|gunicorn -w) (\d+)(?: --threads (\d+))?")


def target(name: str) -> Setup:
    """The server configuration a target names (ValueError for one this tool does not know)."""
    if re.fullmatch(r"/[a-z]+", name):
        return lab(name, name, name[1:])
    match = PEER.fullmatch(name.strip())
    if match is None:
        raise ValueError(f"unknown target {name!r}: a lab route (/threading), 'uwsgi -p 2' or 'gunicorn -w 2'")
    processes, threads = int(match.group(2)), int(match.group(3) or 1)
    mode = "threading" if threads > 1 else "blocking"  # how the lab's capacity model sees it (bench/lib/peers.py)
    config = name.strip().split(" ", 1)[1]
    if match.group(1).startswith("uwsgi"):
        ini = "uwsgi-threads.ini" if threads > 1 else "uwsgi-processes.ini"
        return uwsgi(ini, config, mode, processes, threads, serves=CPU)
    conf = "gunicorn-gthread.conf.py" if threads > 1 else "gunicorn-sync.conf.py"
    return gunicorn(conf, config, mode, processes, threads, serves=CPU)


def pool_reader(server: Running) -> PoolReader:
    """The server's own view of its workers: the lab's pool, uWSGI's busy workers and listen queue."""
    if server.setup.server == "lab":
        return lab_pool(server.url, server.setup.mode)
    socket = server.stats_socket

    def uwsgi_pool() -> tuple[int | None, int | None]:
        doc = uwsgi_stats(socket) if socket is not None else None
        if doc is None:
            return None, None
        busy = sum(1 for w in doc.get("workers", []) if w.get("status") == "busy")
        return busy, int(doc.get("listen_queue", 0))

    return uwsgi_pool if socket is not None else lambda: (None, None)


def build_parser() -> argparse.ArgumentParser:
    parser = new_parser("bench.seed", __doc__)
    parser.add_argument("--targets", default=DEFAULT_TARGETS, help=f"comma-separated (default: {DEFAULT_TARGETS})")
    parser.add_argument("--n", type=int, default=10_000_000, help="count's n (default: 10,000,000)")
    USERS.add(parser)
    parser.add_argument("--requests", type=int, default=300, help="answers each run stops at (default: 300)")
    parser.add_argument("--seconds", type=int, default=600, help="longest a run may take (default: 600)")
    EVERY.add(parser)
    ROUNDS.add(parser, default=1, help="every target N times, in turn (default: 1)")
    OUT.add(parser, help="results folder (default: bench/results/seed-<stamp>/)")
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    check_ranges(parser, ("--users", args.users, 1, 1000), ("--requests", args.requests, 1, 100_000),
                 ("--rounds", args.rounds, 1, 20))  # fmt: skip
    try:
        setups = [target(name) for name in args.targets.split(",") if name.strip()]
    except ValueError as error:
        parser.error(str(error))
    missing = sorted({s.server for s in setups if s.server != "lab" and not (BIN / s.server).exists()})
    if missing:
        print(f"error: bench.seed needs {' and '.join(missing)}, which is not installed; install it with: "
              "make peers", file=sys.stderr)  # fmt: skip
        return 2
    need_module("locust", "Locust", INSTALL, tool="bench.seed")
    return run_command(lambda: _run(args, setups))


def _run(args: argparse.Namespace, setups: list[Setup]) -> None:
    out = args.out or new_results_dir("seed-")
    out.mkdir(parents=True, exist_ok=True)
    crowd = Crowd(users=args.users, requests=args.requests, seconds=args.seconds)
    runs: list[dict[str, Any]] = []
    upstream = EmbeddedUpstream.start()  # the lab's servers want one; count never calls it
    try:
        for number, setup in rounds.schedule(setups, args.rounds):
            label = setup.config if setup.server == "lab" else f"{setup.server} {setup.config}"
            print(f"{label} (round {number}): {args.users} users until {args.requests} answers", file=sys.stderr)
            server = Running.start(setup, out, upstream.url)
            try:
                path = setup.url("", "count", {"n": str(args.n)})
                stem = out / f"{len(runs) + 1}-{re.sub(r'[^a-z0-9]+', '-', label.lower()).strip('-')}"
                doc = measure(server.url, path, crowd, stem, every=args.every, pool=pool_reader(server))
            finally:
                left = server.stop()
            if left:
                raise RuntimeError(f"{label} left processes behind: {left}")
            runs.append({"label": label, "round": number, "path": path, **doc,
                         "summary": summary_row(doc)})  # fmt: skip
    finally:
        upstream.stop()
    _write(args, runs, out)


def _write(args: argparse.Namespace, runs: list[dict[str, Any]], out: Path) -> None:
    findings = seed_findings(runs, users=args.users)
    summary = [{"target": run["label"], "round": run["round"], **run["summary"]} for run in runs]
    (out / "seed.json").write_text(json.dumps({"users": args.users, "requests": args.requests, "n": args.n,
                                               "runs": runs, "findings": findings}, indent=1) + "\n")  # fmt: skip
    columns = ("target", "round", *SUMMARY_COLUMNS)
    lines = [f"# {args.users} users until {args.requests} answers, count n={args.n}", "", "```",
             text(summary, columns), "```", "", "## Findings", "", *(f"- {f}" for f in findings)]  # fmt: skip
    for run in runs:
        lines += ["", f"## {run['label']} (round {run['round']}): {run['path']}", "", "```",
                  text(run["locust"], SEED_COLUMNS), "", text(run["host"], HOST_COLUMNS), "```"]  # fmt: skip
    (out / "seed.md").write_text("\n".join(lines) + "\n")
    for run in runs:
        print(f"\n{run['label']} (round {run['round']}): {run['path']}\n{text(run['locust'], SEED_COLUMNS)}")
        print(f"\n{text(run['host'], HOST_COLUMNS)}")
    print(f"\n{text(summary, columns)}\n")
    print("\n".join(f"- {finding}" for finding in findings))
    print(f"wrote {out / 'seed.json'}\nwrote {out / 'seed.md'}\nwrote {load_charts.seed(out / 'seed.png', runs)}")


if __name__ == "__main__":
    sys.exit(main())
