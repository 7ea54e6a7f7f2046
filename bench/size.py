"""How many processes and threads for this service on this machine: measure, predict, verify, answer.

    python -m bench.size --path '/threading/count?n=2000000'            # a lab route: the lab in each configuration
    python -m bench.size --wsgi peers.app:application --path '/wsgi/sleep?seconds=0.05'   # your WSGI app, gunicorn
    python -m bench.size --path '/threading/count?n=2000000' --quick    # a short sweep (a minute or so)
    python -m bench.size --wsgi myapp:app --path /orders --memory 2048  # at most 2 GB for the serving processes

1. Measure the request alone, two and eight at once, in one process: its
   CPU (from outside: the serving process's CPU time), how long it waits on
   purpose, the wait for the other thread at two at once, how much of its
   CPU holds the GIL (at most 1 / the throughput at eight at once), memory
   per process (RSS, USS, PSS) and per added thread.
2. Read the cores really usable (affinity and cgroup CPU quota, not
   os.cpu_count(); lab/machine.py).
3. Predict the best processes x threads from the model in docs/sizing.md
   (at most one core of GIL-held work per process, so processes about the
   usable cores; threads per process somewhat past 1 + (wait + hand-off)/cpu, where their
   GIL-held turns stop colliding, by Mean Value Analysis; --memory caps
   them), with its throughput and latency (Little's law).
4. Verify: the predicted point, its neighbours and the rules of thumb
   (2 x cores + 1 workers; cores x 2-4 threads), each its own server on a free
   loopback port, in alternating rounds, under closed load (users sending
   back to back) and an open arrival rate near the predicted capacity.
5. Answer: the recommendation, predicted against measured for every point,
   memory, why, and the flags for the lab, gunicorn (-k gthread) and uWSGI.
6. Warn about what it can see: BLAS/OpenMP threads x processes over the
   cores, a CPU quota below the CPUs shown, a pool created before a fork.

A lab route is a /threading/<workload>?<params> route of this lab: the lab is
started with --processes P --thread-pool T for each point. A WSGI app
(--wsgi module:callable, imported from --app-dir) runs under gunicorn -k
gthread -w P --threads T. Writes size.md, size.json and size.png to
bench/results/size-<stamp>/ (or --out). Exit 2 for input it cannot size.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import sys
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

if __package__ in (None, ""):  # run as `python bench/size.py`: make the `bench` package importable
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.charts import sizing as chart
from bench.lib.args import OUT, ROUNDS, SERVER_ARGS
from bench.lib.command import check_ranges, new_parser, run_command
from bench.lib.optional import missing
from bench.lib.peers import BIN
from bench.lib.results import machine_facts, new_results_dir
from bench.lib.sizing import answer, checks, model, probe, verify
from bench.lib.sizing.points import Swept, sweep_points
from bench.lib.sizing.targets import InputError, Target, lab_route, server_args, wsgi_app
from lab.machine import Cores, read_cores
from lab.modes.registry import MODES
from lab.modes.upstream.embedded import EmbeddedUpstream
from lab.race import capacity

PEERS = "make peers (or: .venv/bin/pip install -r requirements-peers.txt)"


def build_parser() -> argparse.ArgumentParser:
    parser = new_parser("bench.size", __doc__)
    parser.add_argument("--path", required=True, help="the route to size: a lab route (/threading/<workload>?...) "
                        "or, with --wsgi, the endpoint of your app (/orders?id=1)")  # fmt: skip
    parser.add_argument("--wsgi", metavar="MODULE:APP", help="size your WSGI app under gunicorn -k gthread instead")
    parser.add_argument("--app-dir", type=Path, default=Path.cwd(), help="where --wsgi's module imports from "
                        "(default: the current directory)")  # fmt: skip
    parser.add_argument("--quick", action="store_true", help="a short sweep: fewer points, one round, 2 s loads")
    parser.add_argument("--memory", type=float, metavar="MB", help="the most memory the serving processes may "
                        "take (the model's estimate): points over it are not recommended or swept")  # fmt: skip
    parser.add_argument("--max-processes", type=int, metavar="N", help="the most processes the model considers "
                        "(default: 2 x usable cores + 1)")  # fmt: skip
    parser.add_argument("--users", type=int, metavar="N", help="closed-load users (default: enough for every "
                        "point's threads, and twice what the predicted throughput holds in flight)")  # fmt: skip
    parser.add_argument("--rate", type=float, metavar="R", help="open-load arrivals a second (default: 90 %% of "
                        "the predicted throughput)")  # fmt: skip
    parser.add_argument("--seconds", type=float, metavar="S", help="each load's length per point and round "
                        "(default: 4, --quick 2, at least 20 requests alone)")  # fmt: skip
    ROUNDS.add(parser, help="rounds over the points, in alternating order (default: 2, --quick 1)")
    SERVER_ARGS.add(parser, help="more flags for every lab server it starts (--database postgresql://...)")
    OUT.add(parser, help="results folder (default: bench/results/size-<stamp>/)")
    return parser


def _check(parser: argparse.ArgumentParser, args: argparse.Namespace) -> None:
    check_ranges(parser, ("--rounds", args.rounds or 1, 1, 20), ("--users", args.users or 1, 1, 1000),
                 ("--max-processes", args.max_processes or 1, 1, 256))  # fmt: skip
    if args.wsgi and args.server_args:
        parser.error("--server-args is for the lab's servers, not --wsgi's gunicorn")
    for name, value in (("--memory", args.memory), ("--rate", args.rate), ("--seconds", args.seconds)):
        if value is not None and value <= 0:
            parser.error(f"{name} must be positive")


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    _check(parser, args)
    if args.wsgi and not (BIN / "gunicorn").exists():
        raise missing("gunicorn", PEERS, tool="bench.size")
    try:
        if args.wsgi:
            target = wsgi_app(args.wsgi, args.path, args.app_dir.resolve())
        else:
            target = lab_route(args.path, server_args(args.server_args))
    except InputError as error:
        print(f"error: {error}", file=sys.stderr)
        return 2
    return run_command(lambda: _advise_or_refuse(target, args))


def _advise_or_refuse(target: Target, args: argparse.Namespace) -> int:
    try:
        advise(target, args)
    except InputError as error:  # found once a server answered (a WSGI path it does not serve)
        print(f"\nerror: {error}", file=sys.stderr)
        return 2
    return 0


class Progress:
    """One progress line on stderr, rewritten in place on a terminal, a line per step otherwise."""

    def __init__(self) -> None:
        self.tty = sys.stderr.isatty()
        self.started = time.monotonic()

    def __call__(self, text: str) -> None:
        line = f"size [{time.monotonic() - self.started:4.0f} s]: {text}"
        print(f"\r\033[K{line}" if self.tty else line, end="" if self.tty else "\n", file=sys.stderr, flush=True)

    def done(self) -> None:
        if self.tty:
            print(file=sys.stderr)


@contextlib.contextmanager
def upstream_for(target: Target) -> Iterator[str]:
    """The upstream the lab's servers are given (one for all, not one each); none for a WSGI app."""
    if target.kind != "lab":
        yield ""
        return
    upstream = EmbeddedUpstream.start()
    try:
        yield upstream.url
    finally:
        upstream.stop()


def advise(target: Target, args: argparse.Namespace) -> dict[str, Any]:
    """Measure, predict, verify and answer; the document written to size.json."""
    cores, progress = read_cores(), Progress()
    out = args.out or new_results_dir("size-")
    out.mkdir(parents=True, exist_ok=True)
    with upstream_for(target) as upstream:
        progress(f"measuring {target.name} alone, two and eight at once")
        measured = probe.measure(target, out, upstream, quick=args.quick)
        split, memory = measured["split"], measured["memory"]
        most = args.max_processes or 2 * cores.usable + 1
        measured["reach"] = reach(cores, progress)
        predicted = model.recommend(split, cores.capacity, memory, args.memory, most)
        points = sweep_points(predicted, cores.usable, quick=args.quick, fits=_fits(memory, args.memory))
        expected = model.capacity(split, measured["reach"]["speed"], predicted).throughput_rps
        plan = verify.plan_for(points, expected, split.alone_ms, quick=args.quick, rounds=args.rounds,
                               users=args.users, rate=args.rate, seconds=args.seconds)  # fmt: skip
        rows = verify.sweep(target, points, plan, out, upstream=upstream, progress=progress)
    progress.done()
    doc = document(Findings(target, cores, measured, points, plan, rows, predicted))
    write(out, doc)
    print(answer.markdown(doc))
    print(f"wrote {out}/size.md, size.json and size.png", file=sys.stderr)
    return doc


def reach(cores: Cores, progress: Progress) -> dict[str, Any]:
    """The cores' worth this host gives just now (lab/race/capacity.py: a loop on every usable core at once
    against one alone). The point is chosen from the cores allowed; the throughput it expects, from these."""
    progress(f"timing {cores.usable} loops at once against one alone")
    found = capacity.measure(cores.usable)
    speed = min(cores.capacity, found.effective_cores)
    return {**asdict(found), "effective_cores": round(found.effective_cores, 3), "speed": round(speed, 3)}


def _fits(memory: model.Memory, allowed_mb: float | None) -> Callable[[model.Point], bool]:
    """Whether a point's serving processes fit in `allowed_mb` (the model's estimate); all do without a limit."""
    return lambda point: allowed_mb is None or memory.total(point.processes, point.threads) <= allowed_mb


@dataclass(frozen=True)
class Findings:
    """What a run found, whole: the target, the cores, the probe's measurements, the sweep and the model's point."""

    target: Target
    cores: Cores
    measured: dict[str, Any]
    points: list[Swept]
    plan: verify.Plan
    rows: list[dict[str, Any]]
    predicted: model.Point


def predictions(found: Findings) -> dict[str, dict[str, Any]]:
    """What the model predicts for each point swept, under the sweep's own load."""
    split, memory, plan = found.measured["split"], found.measured["memory"], found.plan
    speed = found.measured["reach"]["speed"]
    return {
        s.point.label: model.predict(
            split, speed, memory, s.point, users=plan.users, rate=plan.rate, seconds=plan.open_s
        )
        for s in found.points
    }


def interpreters_note(split: model.Split, cores: Cores) -> str:
    """What the model says of sub-interpreters, where this Python has them."""
    modes = [mode for mode in MODES.values() if mode.runs_on == "interpreters"]
    problem = modes[0].unavailable() if modes else "this lab has no interpreters mode"
    if problem:
        return f"interpreters: not on this Python ({problem})"
    count = max(1, round(cores.capacity * split.gil_ms / split.cpu_ms))
    return (f"interpreters: {count} sub-interpreters in one process hold a GIL each, like {count} processes, "
            f"for work that imports no numpy (the lab's /interpreters, --interpreter-pool {count})")  # fmt: skip


def document(found: Findings) -> dict[str, Any]:
    """size.json: the recommendation first, then everything it rests on."""
    split, memory, cores, points, rows = (
        found.measured["split"],
        found.measured["memory"],
        found.cores,
        found.points,
        found.rows,
    )
    summary = verify.summarise(points, rows)
    forecast = predictions(found)
    chosen, because = answer.choose(found.predicted, points, summary)
    verdict = answer.verdict(points, summary, chosen, found.predicted)
    why = answer.why(split, cores.capacity, chosen, summary, verdict["best"]["point"])
    warnings = [
        *checks.quota(cores),
        *checks.native_pools(found.measured["native_threads"], chosen.processes, cores),
        *checks.before_fork(found.target.facts, [r["master_threads"] for r in rows]),
    ]
    note = "; ".join(cores.differences()) or "os.cpu_count(), the affinity and the quota agree"
    return {
        "recommendation": answer.recommendation(chosen, because, why, summary, forecast),
        "flags": answer.flags(chosen),
        "split": model.describe(split),
        "measured": {key: value for key, value in found.measured.items() if key not in ("split", "memory")},
        "memory_model": model.describe(memory),
        "memory_per_thread_mb": verify.thread_memory_mb(summary),
        "model_point": found.predicted.label,
        "points": answer.rows(points, forecast, summary),
        "verdict": verdict,
        "rounds": rows,
        "plan": vars(found.plan),
        "cores": {**vars(cores), "usable": cores.usable, "capacity": cores.capacity, "note": note},
        "warnings": warnings,
        "notes": [interpreters_note(split, cores)],
        "target": {
            "kind": found.target.kind,
            "name": found.target.name,
            "path": found.target.path,
            "app": found.target.app or None,
        },
        "command": "python -m bench.size " + " ".join(sys.argv[1:]),
        "machine": machine_facts(found.measured["native_threads"]),
    }


def write(out: Path, doc: dict[str, Any]) -> None:
    (out / "size.json").write_text(json.dumps(doc, indent=1, default=str) + "\n")
    (out / "size.md").write_text(answer.markdown(doc))
    chart.size(out / "size.png", doc["points"], doc["recommendation"]["label"],
               f"{doc['target']['name']}: {doc['recommendation']['label']} recommended")  # fmt: skip


if __name__ == "__main__":
    sys.exit(main())
