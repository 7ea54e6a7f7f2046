"""A crowd of waits on one event loop: the lab's /async beside a bare Tornado floor, c requests at once.

    python -m bench.crowd                                   # c = 1000, 1 s waits, 5 rounds each
    python -m bench.crowd -c 5000 --rounds 3                # raises the open-files limit it needs, or says how
    python -m bench.crowd --server-args '--upstream-client simple'
    python -m bench.crowd -c 5000 --settled-floor           # the floor's collector set as the lab's

Starts two servers on free loopback ports: the lab (`server.py`, one
process unless --server-args forks it, its embedded upstream) and
bench/bare_server.py, whose one handler only awaits asyncio.sleep. Each
gets one unmeasured burst of the same size (the lab's upstream client
opens its connections then), then the rounds alternate, bare then lab: c
connections opened from one asyncio client, then every request sent at once
(bench/lib/burst.py). Per side and round it
prints the median and longest response, the failures (no answer, or any
status that is not 2xx) and the server's CPU time per request (its process
and its children: the lab's upstream included), then the range over the
rounds and the lab's longest over the floor's, round by round. Writes
crowd.json to bench/results/crowd-<stamp>/ unless --no-files.

Each waiting request holds a socket in this client and one in the server
(the lab: one more to its upstream, and the upstream one), so c = 5,000 or
10,000 needs more open files than a shell allows by default: the run raises
its limits (the hard one too, as root) and, where it cannot, stops before
starting anything with the `ulimit` command to run, or the --processes that
would share the waits among lab processes under the limit:

    python -m bench.crowd -c 10000 --rounds 3 --server-args '--processes 2'
"""

from __future__ import annotations

import argparse
import asyncio
import json
import shlex
import subprocess
import sys
import tempfile
from collections.abc import Callable, Iterator, Sequence
from contextlib import ExitStack, contextmanager
from pathlib import Path
from typing import Any

import psutil

if __package__ in (None, ""):  # run as `python bench/crowd.py`
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.lib.args import CONCURRENCY, NO_FILES, OUT, ROUNDS, SERVER_ARGS, TIMEOUT
from bench.lib.burst import burst
from bench.lib.command import new_parser, run_command
from bench.lib.limits import ensure_open_files
from bench.lib.results import machine_facts, new_results_dir
from bench.lib.servers import SERVING, LocalServer, stop_server, tree, wait_ready
from bench.lib.stats import median
from bench.lib.tables import Column, text_table
from lab import ROOT
from lab.config import parse_args

SIDES = ("bare", "lab")

TABLE = (
    Column("side", "side", "{}"),
    Column("round", "round", "{:d}"),
    Column("median_s", "median s"),
    Column("longest_s", "longest s"),
    Column("failed", "failed", "{:d}"),
    Column("cpu_ms_per_request", "server CPU ms/request", "{:.3f}"),
)


def tally(results: Sequence[tuple[float, float, int]]) -> dict[str, Any]:
    """One burst's median and longest response and its failures: no answer, or a status outside 2xx."""
    durations = [received - sent for sent, received, _ in results]
    return {
        "median_s": round(median(durations), 3),
        "longest_s": round(max(durations), 3),
        "failed": sum(1 for _, _, status in results if not 200 <= status < 300),
    }


def tree_cpu(pid: int) -> float:
    """CPU seconds (user + system) used so far by a process and its live descendants."""
    total = 0.0
    for process in tree(pid):
        try:
            times = process.cpu_times()
        except psutil.Error:
            continue
        total += times.user + times.system + times.children_user + times.children_system
    return total


@contextmanager
def bare_server(folder: Path, flags: Sequence[str] = ()) -> Iterator[tuple[str, int]]:
    """bench/bare_server.py on a free port, in its own session; its (url, pid), stopped with its group."""
    log_path = folder / "bare.log"
    with log_path.open("wb") as log:
        process = subprocess.Popen([sys.executable, "-m", "bench.bare_server", "--port", "0", *flags], cwd=ROOT,
                                   stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT,
                                   start_new_session=True)  # fmt: skip
    try:
        # It logs its address once it listens: connections made from then on wait in its backlog until served.
        yield wait_ready(log_path, process.pid, 60, address=SERVING, ready=lambda url: True), process.pid
    finally:
        stop_server(process, 5.0)


def measure(url: str, pid: int, target: str, concurrency: int, allowed: float) -> dict[str, Any]:
    """One burst against one server: its tally and the server's CPU per request."""
    before = tree_cpu(pid)
    results = asyncio.run(burst(url, target, concurrency, allowed))
    cpu = tree_cpu(pid) - before
    return {**tally(results), "cpu_ms_per_request": round(1000 * cpu / concurrency, 3)}


def run(args: argparse.Namespace, folder: Path, report: Callable[[dict[str, Any]], None]) -> list[dict[str, Any]]:
    """Both servers, a warm-up burst each, then the rounds, alternating; every measured row."""
    targets = {"bare": f"/sleep?seconds={args.delay:g}", "lab": f"/async?delay={args.delay:g}"}
    allowed = args.delay + args.timeout
    rows: list[dict[str, Any]] = []
    with ExitStack() as stack:
        bare = stack.enter_context(bare_server(folder, ["--settled-collector"] if args.settled_floor else []))
        lab = stack.enter_context(LocalServer(shlex.split(args.server_args), folder / "lab.log"))
        assert lab.process is not None
        servers = {"bare": bare, "lab": (lab.url, lab.process.pid)}
        for side in SIDES:
            asyncio.run(burst(servers[side][0], targets[side], args.concurrency, allowed))
        for number in range(1, args.rounds + 1):
            for side in SIDES:
                url, pid = servers[side]
                rows.append({"side": side, "round": number, **measure(url, pid, targets[side], args.concurrency,
                                                                      allowed)})  # fmt: skip
                report(rows[-1])
    return rows


def _span(values: Sequence[float]) -> str:
    low, high = min(values), max(values)
    return f"{low:.2f}" if f"{low:.2f}" == f"{high:.2f}" else f"{low:.2f}-{high:.2f}"


def summary(rows: Sequence[dict[str, Any]]) -> list[str]:
    """Per side, the range over the rounds: one line each; then the lab's longest over the floor's, round by round."""
    lines = []
    for side in SIDES:
        mine = [r for r in rows if r["side"] == side]
        median_s, longest_s, cpu = (
            _span([r[key] for r in mine]) for key in ("median_s", "longest_s", "cpu_ms_per_request")
        )
        lines.append(f"{side:<5} median {median_s} s, longest {longest_s} s, failed {sum(r['failed'] for r in mine)}, "
                     f"server CPU {cpu} ms/request, over {len(mine)} round{'s' if len(mine) > 1 else ''}")  # fmt: skip
    # A round's two bursts ran seconds apart on the same host: their ratio survives its minute-to-minute speed.
    longest = {(r["side"], r["round"]): r["longest_s"] for r in rows}
    ratios = [longest["lab", n] / longest["bare", n] for side, n in longest if side == "lab"]
    lines.append(f"lab/bare longest {_span(ratios)}x, round by round")
    return lines


def build_parser() -> argparse.ArgumentParser:
    parser = new_parser("bench.crowd", __doc__)
    CONCURRENCY.add(parser, default=1000, help="requests at once (default: 1000)")
    parser.add_argument("--delay", type=float, default=1.0, metavar="S", help="each wait (default: 1.0)")
    ROUNDS.add(parser, default=5, help="measured bursts per side (default: 5)")
    TIMEOUT.add(parser, help="a request unanswered S seconds past its wait fails (default: 60)")
    SERVER_ARGS.add(parser, help="flags for the lab server")
    parser.add_argument("--settled-floor", action="store_true",
                        help="the floor's garbage collector set as the lab's (lab/collector.py): "
                             "what is left is the lab's own work, not the collector's")  # fmt: skip
    OUT.add(parser, help="folder for crowd.json (default: a new one)")
    NO_FILES.add(parser)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    if not 1 <= args.concurrency <= 50_000 or not 0 <= args.delay <= 30 or args.rounds < 1:
        parser.error("-c goes from 1 to 50000, --delay from 0 to 30, --rounds from 1")
    ensure_open_files(args.concurrency, parse_args(shlex.split(args.server_args)).process_count, can_fork=True)
    return run_command(lambda: _crowd(args))


def _crowd(args: argparse.Namespace) -> None:
    """The rounds, each row on stderr as it is measured; then the table, the ranges and crowd.json."""
    print(f"{args.concurrency} waits of {args.delay:g} s at once, {args.rounds} rounds per side", file=sys.stderr)
    with tempfile.TemporaryDirectory(prefix="crowd-") as tmp:
        rows = run(args, Path(tmp), lambda row: print(text_table([row], TABLE).splitlines()[-1], file=sys.stderr))
    print(text_table(rows, TABLE))
    print()
    lines = summary(rows)
    print("\n".join(lines))
    if not args.no_files:
        out = args.out or new_results_dir("crowd-")
        out.mkdir(parents=True, exist_ok=True)
        doc = {"concurrency": args.concurrency, "delay": args.delay, "server_args": args.server_args,
               "settled_floor": args.settled_floor, "rows": rows,
               "summary": lines, "machine": machine_facts(None)}  # fmt: skip
        (out / "crowd.json").write_text(json.dumps(doc, indent=1) + "\n")
        print(f"wrote {out / 'crowd.json'}")


if __name__ == "__main__":
    sys.exit(main())
