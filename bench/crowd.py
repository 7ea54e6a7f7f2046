"""A crowd of waits on one event loop: the lab's /async beside a bare Tornado floor, c requests at once.

    python -m bench.crowd                                   # c = 1000, 1 s waits, 5 rounds each
    python -m bench.crowd -c 5000 --rounds 3                # raises the open-files limit it needs, or says how
    python -m bench.crowd --server-args '--upstream-client simple'
    python -m bench.crowd -c 5000 --settled-floor           # the floor's collector set as the lab's
    python -m bench.crowd --floor sleep                     # a floor that only sleeps: no upstream call

Starts two servers on free loopback ports: the lab (`server.py`, one
process unless --server-args forks it, its embedded upstream) and
bench/bare_server.py, the floor, whose /async makes the same call to the
same upstream with the lab's own client and nothing else (with --floor
sleep it only awaits asyncio.sleep instead). Each gets one unmeasured
burst of the same size (the upstream clients open their connections then),
then the rounds alternate, bare then lab: c connections opened from one
asyncio client, then every request sent at once (bench/lib/burst.py). Per
side and round it prints the median and longest response, the failures (no
answer, or any status that is not 2xx) and the serving process's CPU time
per request (the upstream's, which both call, left out), then the range
over the rounds and the lab's longest over the floor's, round by round.
Writes crowd.json to bench/results/crowd-<stamp>/ unless --no-files.

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
import sys
import tempfile
from collections.abc import Callable, Sequence
from contextlib import ExitStack
from pathlib import Path
from typing import Any

if __package__ in (None, ""):  # run as `python bench/crowd.py`
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.lib.args import CONCURRENCY, NO_FILES, OUT, ROUNDS, SERVER_ARGS, TIMEOUT
from bench.lib.burst import burst
from bench.lib.command import new_parser, run_command
from bench.lib.limits import ensure_open_files
from bench.lib.results import machine_facts, new_results_dir
from bench.lib.servers import LocalServer, floor_server, own_cpu
from bench.lib.tables import Column, text_table
from lab import loopback
from lab.config import parse_args
from lab.race.stats import median

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


def measure(url: str, pid: int, target: str, concurrency: int, allowed: float) -> dict[str, Any]:
    """One burst against one server: its tally and the serving process's CPU per request."""
    before = own_cpu([pid])
    results = asyncio.run(burst(url, target, concurrency, allowed))
    cpu = own_cpu([pid]) - before
    return {**tally(results), "cpu_ms_per_request": round(1000 * cpu / concurrency, 3)}


def upstream_of(url: str) -> str:
    """The upstream the lab at `url` calls (its /stats facts: the embedded one, or its --upstream)."""
    with loopback.urlopen(f"{url}/stats", timeout=10) as reply:
        upstream = json.loads(reply.read())["server"].get("upstream")
    if not upstream:
        raise RuntimeError(f"{url}/stats names no upstream")
    return str(upstream)


def run(args: argparse.Namespace, folder: Path, report: Callable[[dict[str, Any]], None]) -> list[dict[str, Any]]:
    """Both servers, a warm-up burst each, then the rounds, alternating; every measured row."""
    wait = f"delay={args.delay:g}"
    targets = {"bare": f"/sleep?seconds={args.delay:g}" if args.floor == "sleep" else f"/async?{wait}",
               "lab": f"/async?{wait}"}  # fmt: skip
    allowed = args.delay + args.timeout
    rows: list[dict[str, Any]] = []
    with ExitStack() as stack:
        lab = stack.enter_context(LocalServer(shlex.split(args.server_args), folder / "lab.log"))
        flags = ["--settled-collector"] if args.settled_floor else []
        if args.floor == "upstream":  # the same call to the same upstream: the lab's own
            flags += ["--upstream", upstream_of(lab.url)]
        bare = stack.enter_context(floor_server(folder, flags))
        servers = {"bare": bare, "lab": (lab.url, lab.pid)}
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
    parser.add_argument("--floor", choices=("upstream", "sleep"), default="upstream",
                        help="the floor's wait: the lab's upstream call (default) or asyncio.sleep")  # fmt: skip
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
               "settled_floor": args.settled_floor, "floor": args.floor, "rows": rows,
               "summary": lines, "machine": machine_facts(None)}  # fmt: skip
        (out / "crowd.json").write_text(json.dumps(doc, indent=1) + "\n")
        print(f"wrote {out / 'crowd.json'}")


if __name__ == "__main__":
    sys.exit(main())
