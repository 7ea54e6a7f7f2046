"""The lab's own tax: each mode's cost for a request that does no work, beside a bare Tornado floor doing the same hop.

    python -m bench.overhead                                  # a lab and a floor of its own; 3 rounds, c = 1 and 10
    python -m bench.overhead --url http://127.0.0.1:8000      # a running lab (the floor sized from its /stats)
    python -m bench.overhead --routes ping,threading --concurrency 10 --rounds 5 --parts hops

Five parts, the first four in alternating rounds (bench/lib/alternate.py:
both sides back to back, their order flipped each round, the ratio taken per
round), in this order:

hops    For every route (/ping, /{mode}/count?n=1, /async?delay=0.01) and
        concurrency, ab (bench/lib/ab.py, keep-alive) for --seconds against
        the lab, then against the floor (bench/bare_server.py, started here:
        the same hop and nothing else; its pools the lab's sizes, its /async
        the same call to the lab's upstream, its /distributed a submit to the
        lab's Dask scheduler). Microseconds per request (the batch's wall time
        over its requests), the serving process's CPU and its threads'
        context switches per request, ab's own CPU share (near 1 would make
        the client the limit), lab / floor.
gil     /ping during ten GIL-bound /threading/count?n=--gil-load requests
        (bench/lib/convoy.py), on each side with the same thread pool:
        the probes' median and longest, lab / floor.
noise   The floor against a copy of itself (a second bare_server.py, the
        same flags), /ping at each concurrency, alternating as hops does:
        copy / floor per round, which would be 1.00 on a quiet host. How far
        it strays is how far any other ratio of the run can stray with
        nothing to do with the lab.
accept  Two forked labs of its own (--processes 2), --accept dispatch and
        --accept all, and the floor forked the same two ways (a bare parent
        that only accepts and sends each connection to the next child:
        what the hop itself costs): ab -i (HEAD /ping, a new connection
        each), requests per second, dispatch / all for each. Not with --url.
instruments  Each of the lab's instruments alone, in this process
        (bench/lib/meters.py): microseconds per call of the clocks, a
        schedstat read, the core and GIL meters, the board, the counters, the
        occupancy, a request's life, the envelope.

One more part, only when named in --parts, since it takes minutes:

callgrind  A lab and a floor of its own, each run under valgrind's
        callgrind (bench/lib/callgrind.py): for every route and concurrency,
        as many requests as its warm-up answered in --seconds, every one
        answered; thousands of instructions the serving process executes a
        request (its idle rate taken off), lab / floor, in alternating
        rounds. A count the host's speed does not move, where the hops
        part's times move with it; not with --url.

A route the lab cannot serve (interpreters before Python 3.12) is skipped
with a line saying why. Writes overhead.json and overhead.md under
bench/results/overhead-<stamp>/, with the machine, Python and commit.
"""

from __future__ import annotations

import argparse
import json
import shlex
import sys
import tempfile
from collections.abc import Sequence
from contextlib import ExitStack
from pathlib import Path
from typing import Any

if __package__ in (None, ""):  # run as `python bench/overhead.py`: make the `bench` package importable
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.lib.ab import ab_batch, need_ab
from bench.lib.alternate import alternate
from bench.lib.args import NO_FILES, OUT, ROUNDS, SERVER_ARGS, TIMEOUT, URL
from bench.lib.callgrind import Counted, need_valgrind, per_request, valgrind_prefix
from bench.lib.command import check_ranges, new_parser, run_command
from bench.lib.convoy import convoy
from bench.lib.meters import instrument_costs
from bench.lib.results import machine_facts, new_results_dir
from bench.lib.servers import LocalServer, floor_server, lab_server, own_cpu
from bench.lib.sizing.outside import switches_between, thread_switches
from bench.lib.tax import ROUTES, Target, lab_targets, report_lines, summaries

PARTS = ("hops", "gil", "noise", "accept", "instruments")
SLOW_PARTS = ("callgrind",)  # only when named
SIDES = ("floor", "lab")
NOISE_SIDES = ("floor", "copy")
POLICIES = ("all", "dispatch")


def _names(text: str, allowed: Sequence[str], flag: str, parser: argparse.ArgumentParser) -> list[str]:
    names = [name.strip() for name in text.split(",") if name.strip()]
    if not names or any(name not in allowed for name in names):
        parser.error(f"{flag} takes a comma-separated list of {', '.join(allowed)} (got {text!r})")
    return names


def _integers(text: str, flag: str, parser: argparse.ArgumentParser) -> list[int]:
    try:
        values = [int(part) for part in text.split(",") if part.strip()]
    except ValueError:
        values = []
    if not values or not all(1 <= value <= 1000 for value in values):
        parser.error(f"{flag} takes a comma-separated list of integers from 1 to 1000 (got {text!r})")
    return values


def build_parser() -> argparse.ArgumentParser:
    parser = new_parser("bench.overhead", __doc__)
    URL.add(parser)
    SERVER_ARGS.add(parser, help="flags for the lab servers started here (all of them)")
    parser.add_argument("--routes", default=",".join(ROUTES), help=f"what to measure (default: {','.join(ROUTES)})")
    every = ",".join(PARTS + SLOW_PARTS)
    parser.add_argument(
        "--parts", default=",".join(PARTS), help=f"which parts, of {every} (default: {','.join(PARTS)})"
    )
    parser.add_argument("-c", "--concurrency", default="1,10", help="connections at once, a list (default: 1,10)")
    ROUNDS.add(parser, default=3, help="alternating rounds (default: 3)")
    parser.add_argument("--seconds", type=int, default=2, metavar="S", help="each ab batch, whole seconds (default: 2)")
    parser.add_argument("-n", "--count", type=int, default=1, metavar="N", help="count's n in the modes (default: 1)")
    parser.add_argument("--delay", type=float, default=0.01, metavar="S", help="/async's delay (default: 0.01)")
    parser.add_argument("--gil-load", type=int, default=15_000_000, metavar="N",
                        help="count's n in the gil part's ten /threading requests (default: 15000000)")  # fmt: skip
    parser.add_argument("--gil-requests", type=int, default=10, metavar="K", help="how many (default: 10)")
    parser.add_argument("--ping-every", type=float, default=0.05, metavar="S",
                        help="the gil part's probe rests this long between pings (default: 0.05)")  # fmt: skip
    OUT.add(parser, help="folder for overhead.json and overhead.md (default: a new one)")
    NO_FILES.add(parser)
    TIMEOUT.add(parser, help="per request (default: 60)")
    return parser


def parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    parser = build_parser()
    args = parser.parse_args(argv)
    args.routes = _names(args.routes, ROUTES, "--routes", parser)
    args.parts = _names(args.parts, PARTS + SLOW_PARTS, "--parts", parser)
    args.concurrency = _integers(args.concurrency, "--concurrency", parser)
    check_ranges(parser, ("--rounds", args.rounds, 1, 50), ("--gil-requests", args.gil_requests, 1, 100),
                 ("--count", args.count, 1, 200_000_000), ("--gil-load", args.gil_load, 1, 200_000_000))  # fmt: skip
    check_ranges(parser, ("--seconds", args.seconds, 1, 600))
    if not 0 <= args.delay <= 30 or not 0 <= args.ping_every <= 10:
        parser.error("--delay goes from 0 to 30, --ping-every from 0 to 10")
    return args


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_args(argv)
    if {"hops", "accept", "callgrind"} & set(args.parts):
        need_ab("bench.overhead")
    if "callgrind" in args.parts and not args.url:
        need_valgrind("bench.overhead")
    command = "python -m bench.overhead " + shlex.join(sys.argv[1:] if argv is None else argv)
    return run_command(lambda: measure(args, command.strip()))


def progress(row: dict[str, Any]) -> None:
    what = row.get("route") or (f"accept ({row['server']})" if "policy" in row else "gil")
    keys = ("us_per_request", "per_second", "ping_median_ms", "ping_max_ms", "k_instructions")
    shown = {key: row[key] for key in keys if key in row}
    print(f"round {row['round']} {row['side']:<8} {what} c={row.get('concurrency', '-')} {shown}", file=sys.stderr)


def measure(args: argparse.Namespace, command: str) -> None:
    """The lab (its own or --url's) and the floor beside it, then the forked labs; the tables and files."""
    doc: dict[str, Any] = {"command": command, "url": args.url, "parts": args.parts, "rounds": args.rounds}
    if {"hops", "gil", "noise"} & set(args.parts):
        beside_the_floor(args, doc)
    if "accept" in args.parts and args.url:
        doc.setdefault("skipped", []).append("accept: it starts forked labs of its own, not with --url")
    elif "accept" in args.parts:  # once the lab and the floor have stopped: the forked labs get the machine
        doc["accept"] = accept(args)
    if "instruments" in args.parts:
        doc["instruments"] = instrument_costs()
    if "callgrind" in args.parts and args.url:
        doc.setdefault("skipped", []).append("callgrind: it starts a lab of its own under valgrind, not with --url")
    elif "callgrind" in args.parts:
        doc["callgrind"] = counted(args)
    doc["machine"] = machine_facts(None)
    doc["summaries"] = summaries(doc)
    print("\n".join(report_lines(doc)))
    if not args.no_files:
        out = args.out or new_results_dir("overhead-")
        out.mkdir(parents=True, exist_ok=True)
        (out / "overhead.json").write_text(json.dumps(doc, indent=1) + "\n")
        (out / "overhead.md").write_text("\n".join(report_lines(doc, markdown=True)) + "\n")
        print(f"wrote {out / 'overhead.json'}\nwrote {out / 'overhead.md'}")


def beside_the_floor(args: argparse.Namespace, doc: dict[str, Any]) -> None:
    """The hops and gil parts: the lab and a floor sized after it, both stopped however the run ends."""
    with tempfile.TemporaryDirectory(prefix="overhead-") as tmp, ExitStack() as stack:
        base = stack.enter_context(lab_server(args.url, args.server_args, "overhead-lab-"))
        targets, skipped, flags, pids = lab_targets(base, args)
        doc |= {"skipped": skipped, "floor_flags": flags}
        for line in skipped:
            print(f"skipped: {line}", file=sys.stderr)
        floor, floor_pid = stack.enter_context(floor_server(Path(tmp), flags))
        servers = {"lab": (base, pids), "floor": (floor, [floor_pid])}
        if "hops" in args.parts:
            doc["warmups"] = []
            doc["hops"] = hops(args, targets, servers, doc["warmups"])
        if "gil" in args.parts:
            path = f"/threading/count?n={args.gil_load}"
            doc["gil"] = alternate([path], SIDES, args.rounds, lambda p, side: gil_round(args, servers[side][0], p),
                                   progress)  # fmt: skip
        if "noise" in args.parts:
            copy, copy_pid = stack.enter_context(floor_server(Path(tmp), flags, "floor-copy"))
            servers["copy"] = (copy, [copy_pid])
            doc["noise"] = noise(args, servers)


def noise(args: argparse.Namespace, servers: dict[str, tuple[str, list[int]]]) -> list[dict[str, Any]]:
    """The floor's /ping against its copy's, as hops measures the lab against the floor."""
    pair = {side: servers[side] for side in NOISE_SIDES}
    return hops(args, [Target("ping", "/ping")], pair, [], NOISE_SIDES)


def hops(
    args: argparse.Namespace,
    targets: Sequence[Target],
    servers: dict[str, tuple[str, list[int]]],
    warmups: list[dict[str, Any]],
    sides: tuple[str, str] = SIDES,
) -> list[dict[str, Any]]:
    """Every target at every concurrency on both sides, alternating, after an unmeasured batch each (`warmups`)."""
    items = [(target, c) for target in targets for c in args.concurrency]
    for target in targets:  # unmeasured: pools, connections and caches warm on both sides
        for side, (base, _) in servers.items():
            warm = ab_batch(base + target.path, concurrency=max(args.concurrency), seconds=1, timeout=args.timeout)
            warmups.append({"side": side, "route": target.route, "requests": warm.requests})

    def one(item: tuple[Target, int], side: str) -> dict[str, Any]:
        (target, c), (base, pids) = item, servers[side]
        before, switched = own_cpu(pids), [thread_switches(pid) for pid in pids]
        batch = ab_batch(base + target.path, concurrency=c, seconds=args.seconds, timeout=args.timeout)
        cpu = own_cpu(pids) - before
        switches = sum(switches_between(was, thread_switches(pid)) for pid, was in zip(pids, switched, strict=True))
        n = batch.requests
        return {
            "route": target.route, "path": target.path, "concurrency": c, **batch.row(),
            "server_cpu_us": round(1e6 * cpu / n, 1) if n else None,
            "server_switches": round(switches / n, 2) if n else None,
        }  # fmt: skip

    return alternate(items, sides, args.rounds, one, progress)


def gil_round(args: argparse.Namespace, base: str, path: str) -> dict[str, Any]:
    """One convoy on one side: /ping's latencies while --gil-requests GIL-bound requests run."""
    return convoy(base, path, requests=args.gil_requests, every=args.ping_every, timeout=args.timeout).row()


def accept(args: argparse.Namespace) -> list[dict[str, Any]]:
    """Forked labs with --accept all and dispatch, and the floor forked both ways (bench/lib/floor_fork.py): HEAD
    /ping, a new connection each; each server's two policies back to back, their order flipped each round."""
    bases: dict[tuple[str, str], str] = {}
    with tempfile.TemporaryDirectory(prefix="overhead-accept-") as tmp, ExitStack() as stack:
        for policy in POLICIES:
            flags = [*shlex.split(args.server_args), "--processes", "2", "--accept", policy]
            bases["lab", policy] = stack.enter_context(LocalServer(flags, Path(tmp) / f"{policy}.log")).url
            floor_flags = ["--thread-pool", "1", "--processes", "2", "--accept", policy]
            bases["floor", policy] = stack.enter_context(floor_server(Path(tmp), floor_flags, f"floor-{policy}"))[0]
        for base in bases.values():
            ab_batch(f"{base}/ping", concurrency=max(args.concurrency), seconds=1, keep_alive=False, head=True,
                     timeout=args.timeout)  # fmt: skip

        def one(item: tuple[str, int], policy: str) -> dict[str, Any]:
            server, c = item
            batch = ab_batch(f"{bases[server, policy]}/ping", concurrency=c, seconds=args.seconds, keep_alive=False,
                             head=True, timeout=args.timeout)  # fmt: skip
            return {"server": server, "policy": policy, "concurrency": c, **batch.row()}

        items = [(server, c) for c in args.concurrency for server in SIDES[::-1]]
        return alternate(items, POLICIES, args.rounds, one, progress)


def counted(args: argparse.Namespace) -> list[dict[str, Any]]:
    """A lab and a floor sized after it, each under callgrind: every route and concurrency, alternating, the
    serving process's instructions a request (bench/lib/callgrind.py), after an unmeasured batch each."""
    with tempfile.TemporaryDirectory(prefix="overhead-callgrind-") as tmp, ExitStack() as stack:
        folder = Path(tmp)
        lab = stack.enter_context(LocalServer(shlex.split(args.server_args), folder / "lab.log",
                                              prefix=valgrind_prefix(folder, "lab")))  # fmt: skip
        targets, skipped, flags, _ = lab_targets(lab.url, args)
        for line in skipped:
            print(f"skipped: {line}", file=sys.stderr)
        floor, floor_pid = stack.enter_context(floor_server(folder, flags, prefix=valgrind_prefix(folder, "floor")))
        servers = {"lab": (lab.url, Counted(lab.pid, folder, "lab")),
                   "floor": (floor, Counted(floor_pid, folder, "floor"))}  # fmt: skip
        rates = {}  # each side's requests a second on each route, from its second warm-up: how many make --seconds
        for target in targets:
            for side, (base, _) in servers.items():
                for _ in range(2):  # (the first is slower still: valgrind translates the code it meets first)
                    warm = ab_batch(base + target.path, concurrency=max(args.concurrency), seconds=1,
                                    timeout=args.timeout)  # fmt: skip
                rates[side, target] = warm.per_second

        def one(item: tuple[Target, int], side: str) -> dict[str, Any]:
            (target, c), (base, server) = item, servers[side]
            requests = max(10 * c, round(rates[side, target] * args.seconds))
            found = per_request(server, base + target.path, concurrency=c, requests=requests, seconds=args.seconds,
                                timeout=args.timeout)  # fmt: skip
            return {"route": target.route, "path": target.path, "concurrency": c, **found}

        items = [(target, c) for target in targets for c in args.concurrency]
        return alternate(items, SIDES, args.rounds, one, progress)


if __name__ == "__main__":
    sys.exit(main())
