"""A soak: the lab under steady mixed traffic for minutes or hours, with faults, watched for leaks.

    python -m bench.soak                                  # 10 minutes, a lab of its own (--processes 2)
    python -m bench.soak --minutes 60                     # an hour
    python -m bench.soak --url http://127.0.0.1:8000      # a running lab: only what it can see from here
    python -m bench.soak --minutes 2 --faults kill-worker,kill-child --warmup 20

Sends every mode the server can run (its /modes, with every workload its
/workloads lists for each; async with its own params), /stats, /metrics,
/ping every second and the page's race now and then, at --load (70 %) of
the capacity the registry predicts for that mix on this machine. Every
--sample-every seconds it samples each of the lab's processes from outside
(RSS, open descriptors, threads, children: the server's parent and
children, the pool workers, the embedded upstream, Dask's workers) and the
lab's /stats, and prints a progress line. Faults come on a schedule: a
process-pool worker SIGKILLed, a forked server process SIGKILLed, a job
over --job-timeout, clients that hang up mid-request, a burst past
--max-pending. After each, a quiet check: the traffic pauses, every mode
is warmed to its bounds, and each role's processes, descriptors and
threads must return to the baseline exactly.

The verdict (after the warm-up): RSS of every process within 5 % of its
baseline and no upward trend over the last half; every quiet check back
at the baseline; no error status a fault was not designed to cause; /ping's
p99 steady; every request accounted for (sent = answered + counted
errors). Writes soak.json, soak.md, soak.png and requests.csv under
bench/results/soak-<stamp>/ (or --out). Exit 0 when the verdict passes,
1 when it fails. docs/bench.md explains every rule and column.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import shlex
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

if __package__ in (None, ""):  # run as `python bench/soak.py`
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import psutil

from bench.charts import soak as soak_chart
from bench.lib.args import OUT, PARAM, SERVER_ARGS, TIMEOUT, URL
from bench.lib.command import check_ranges, new_parser, run_command
from bench.lib.results import commit, machine_facts, new_results_dir
from bench.lib.servers import LocalServer, say_if_lazy
from bench.lib.soak.census import find_root, listens_on
from bench.lib.soak.faults import FAULTS
from bench.lib.soak.ledger import write_csv
from bench.lib.soak.link import Link
from bench.lib.soak.mix import LIGHT_SCALE, Choice
from bench.lib.soak.report import document, judge, markdown
from bench.lib.soak.run import Plan, Run, soak, stderr_line
from bench.lib.soak.watch import LabWatch

# The lab this soak starts: short bounds, so that its faults are quick to cause and to recover from
# (a 15 s job timeout, 10 jobs waiting per pool, upstream connections closed after 2 s idle).
OWN_SERVER = "--job-timeout 15 --max-pending 10 --upstream-idle 2"


def _names(text: str) -> tuple[str, ...]:
    return tuple(name.strip() for name in text.split(",") if name.strip())


def _faults(text: str) -> tuple[str, ...]:
    names = tuple(name.strip() for name in text.split(",") if name.strip())
    wrong = [name for name in names if name not in FAULTS]
    if wrong:
        raise argparse.ArgumentTypeError(f"unknown fault(s) {', '.join(wrong)}; faults: {', '.join(FAULTS)}")
    return names


# A lab server's RSS climbs for minutes as it meets every route, fault and burst, then levels: in an hour's
# soak (docs/results.md#soak) server 0 held 151 MiB at a baseline taken after a minute, 155 MiB at 6
# minutes, 156 at 12, 158 at 15 and 159 at 60, and each forked replacement climbed the same way from its
# start. That baseline counted the climb as growth (+5.5 %); one taken after a fifth of the soak (12
# minutes of an hour) leaves about 2 % of it, under the 5 % a process may grow.
WARMUP_SHARE = 0.2
MIN_WARMUP_S = 60.0


def default_warmup(minutes: float) -> float:
    """Seconds of warm-up before the baseline when --warmup is not given: a fifth of the soak, 60 at least."""
    return max(MIN_WARMUP_S, WARMUP_SHARE * 60 * minutes)


def build_parser() -> argparse.ArgumentParser:
    parser = new_parser("bench.soak", __doc__)
    parser.add_argument("--minutes", type=float, default=10.0, help="minutes of traffic, warm-up included (10)")
    parser.add_argument("--warmup", type=float, metavar="S",
                        help="seconds of traffic (and one of each fault) before the baseline (default: a fifth of "
                             "--minutes, at least 60)")  # fmt: skip
    parser.add_argument("--sample-every", type=float, default=10.0, metavar="S", help="seconds between samples (10)")
    parser.add_argument("--fault-every", type=float, default=60.0, metavar="S", help="seconds between faults (60)")
    parser.add_argument("--faults", type=_faults, default=tuple(FAULTS), metavar="A,B",
                        help=f"which faults, in turn (default: {','.join(FAULTS)}; none: '')")  # fmt: skip
    parser.add_argument("--no-rehearse", action="store_true", help="no fault during the warm-up")
    parser.add_argument("--load", type=float, default=0.7, help="share of the predicted capacity to send (0.7)")
    parser.add_argument("--scale", type=float, default=LIGHT_SCALE,
                        help=f"numeric params at this share of their default ({LIGHT_SCALE:g})")  # fmt: skip
    PARAM.add(parser, help="a param of the mix, WORKLOAD.NAME=VALUE (async.delay=0.1), repeatable")
    parser.add_argument("--modes", type=_names, metavar="A,B", help="only these modes (default: every one it can run)")
    parser.add_argument("--race-every", type=float, default=60.0, metavar="S", help="a race every S s (60; 0: none)")
    parser.add_argument("--ping-every", type=float, default=1.0, metavar="S", help="seconds between pings (1)")
    parser.add_argument("--settle", type=float, default=60.0, metavar="S",
                        help="seconds a quiet check may wait for the baseline (60)")  # fmt: skip
    parser.add_argument("--recover", type=float, default=5.0, metavar="S",
                        help="seconds of traffic after a fault before its quiet check (5)")  # fmt: skip
    parser.add_argument("--solo-runs", type=int, default=3, metavar="N", help="requests alone per mix entry for t (3)")
    TIMEOUT.add(parser, default=120.0, help="seconds a request may take before it counts as unanswered (120)")
    parser.add_argument("--processes", type=int, default=2, help="the own lab's --processes (2)")
    URL.add(parser)
    SERVER_ARGS.add(parser, default=OWN_SERVER, help=f"more flags for the own lab (default: {OWN_SERVER})")
    OUT.add(parser, help="results folder (default: bench/results/soak-<stamp>/)")
    return parser


def _chosen(pairs: Sequence[tuple[str, str]], parser: argparse.ArgumentParser) -> dict[str, dict[str, str]]:
    chosen: dict[str, dict[str, str]] = {}
    for name, value in pairs:
        owner, dot, param = name.partition(".")
        if not dot or not owner or not param:
            parser.error(f"-p {name}={value}: name a workload's (or async's) param as WORKLOAD.NAME=VALUE")
        chosen.setdefault(owner, {})[param] = value
    return chosen


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    check_ranges(parser, ("--solo-runs", args.solo_runs, 1, 20), ("--processes", args.processes, 1, 64))
    positive = ("minutes", "sample_every", "fault_every", "ping_every", "settle", "timeout", "scale")
    if any(getattr(args, name) <= 0 for name in positive) or not 0 < args.load <= 2:
        parser.error("--minutes, --sample-every, --fault-every, --ping-every, --settle, --timeout and --scale "
                     "must be positive, --load between 0 and 2")  # fmt: skip
    if args.warmup is None:
        args.warmup = default_warmup(args.minutes)
    if args.warmup < 0 or args.race_every < 0 or args.recover < 0:
        parser.error("--warmup, --race-every and --recover cannot be negative")
    choice = Choice(args.scale, _chosen(args.param, parser), frozenset(args.modes) if args.modes else None)
    plan = Plan(args.minutes, args.warmup, args.sample_every, args.fault_every, args.faults, not args.no_rehearse,
                args.load, choice, args.race_every, args.ping_every, args.settle, args.recover, args.timeout,
                args.solo_runs)  # fmt: skip
    return run_command(lambda: _soak(args, plan))


def _soak(args: argparse.Namespace, plan: Plan) -> int:
    out = args.out or new_results_dir("soak-")
    out.mkdir(parents=True, exist_ok=True)
    if args.url:
        say_if_lazy(args.url)
        return _measure(args.url, None, plan, out)
    server_args = f"--processes {args.processes} {args.server_args}"
    print(f"starting a server: server.py {server_args} (its log: {out / 'server.log'})", file=sys.stderr)
    # Its log stays with the results: what the lab said while it was soaked explains what the soak saw.
    with LocalServer(shlex.split(server_args), out / "server.log") as server:
        return _measure(server.url, server.pid, plan, out, server_args)


def _measure(url: str, root: int | None, plan: Plan, out: Path, server_args: str | None = None) -> int:
    notes: list[str] = []
    link = Link(url, plan.timeout)
    if root is None:
        root = _visible_root(link, notes)
    run = Run(plan, link, LabWatch(link, root))
    cpu_before = psutil.Process().cpu_times(), time.monotonic()
    # The commit the soak started from: an hour later the checkout may have moved on (an hour's soak recorded
    # the commit made while it ran), and the code that ran is the code imported now.
    code = commit()
    try:
        asyncio.run(soak(run, stderr_line))
    finally:
        _write(run, out, {"url": url, "server_args": server_args, "notes": notes}, cpu_before, code)
    return 0 if json.loads((out / "soak.json").read_text())["verdict"]["ok"] else 1


def _visible_root(link: Link, notes: list[str]) -> int | None:
    """The running lab's top process, if it is on this machine and ours to see; a note saying what is not."""
    stats = asyncio.run(link.stats("setup"))
    root = find_root(stats)
    if root is not None and urlsplit(link.base).hostname in ("127.0.0.1", "localhost", "::1") and listens_on(
            root, link.port):  # fmt: skip
        notes.append(f"a running lab (--url): its processes from pid {root} down, as seen from here; its "
                     "settings are its own, and anyone else's traffic to it is in its counts")  # fmt: skip
        return root
    notes.append("a running lab (--url) whose processes are not visible from here (another machine, user or "
                 "container): no process samples, no quiet checks of descriptors and threads, and no fault "
                 "that kills a process; the requests, /stats and /ping only")  # fmt: skip
    return None


def settings(plan: Plan) -> dict[str, Any]:
    """The plan as soak.json records it."""
    choice = plan.choice
    modes = sorted(choice.modes) if choice.modes else None
    mix = {"scale": choice.scale, "params": dict(choice.params), "modes": modes}
    return {**{k: v for k, v in plan.__dict__.items() if k != "choice"}, "faults": list(plan.faults), **mix}


def _write(run: Run, out: Path, about: dict[str, Any], began: tuple[Any, float], code: str | None) -> None:
    """soak.json, soak.md, requests.csv and soak.png, whatever state the run ended in."""
    checks = judge(run)
    now, (cpu, monotonic) = psutil.Process().cpu_times(), began
    own_cpu = now.user + now.system - cpu.user - cpu.system
    wall = round(time.monotonic() - monotonic, 1)
    extra = {**about, "own_server": about["server_args"] is not None,
             "settings": settings(run.plan),
             "machine": machine_facts(None, soak_cpu_s=round(own_cpu, 1), wall_s=wall, commit=code,
                                      command=shlex.join(sys.argv))}  # fmt: skip
    doc = document(run, checks, extra)
    (out / "soak.json").write_text(json.dumps(doc, indent=1) + "\n")
    (out / "soak.md").write_text(markdown(doc))
    write_csv(out / "requests.csv", run.link.ledger.records)
    if run.watch.series:
        soak_chart.draw(out / "soak.png", doc)
    failed = [c for c in checks if not c.ok]
    print(f"{'PASS' if not failed else 'FAIL'}: {len(checks)} checks, {len(failed)} failed; "
          f"unaccounted {doc['unaccounted']}")  # fmt: skip
    for check in failed:
        print(f"  {check.rule}, {check.subject}: {check.detail}")
    print(f"wrote {out / 'soak.json'}\nwrote {out / 'soak.md'}\nwrote {out / 'requests.csv'}")
    if run.watch.series:
        print(f"wrote {out / 'soak.png'}")


if __name__ == "__main__":
    sys.exit(main())
