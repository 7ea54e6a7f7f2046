"""Open-model load: requests arriving at a steady rate, stepped past a mode's capacity, to find the knee.

    python -m bench.knee                                      # /threading and /processing on count n=3,000,000
    python -m bench.knee --modes processing --steps 0.5,1,1.5,2 --step-seconds 15
    python -m bench.knee --bounds 10000,100,2                 # --max-pending of each server compared

Every other bench tool is a closed burst: N requests, then wait. Here Locust
offers R requests/s, evenly spaced, whether or not the server keeps up
(bench/locustfile.py --lab-arrivals: the k-th request is due k/R s after the
first; there are as many users as requests, so none waits for a free user).
Each mode's capacity is predicted from the registry: lanes (lab/modes/registry.py, as
the ideal counts them: 1 for GIL-bound threads, a worker per core for
processes) over t (the median of --solo-runs requests sent alone). The
offered rate steps through --steps multiples of it, --step-seconds each,
against one server per --bounds value (its --max-pending), in turn, the
server's queue drained between steps. Below capacity an answer takes about t;
past it the queue grows by the excess every second and so does the wait:
the knee, the first step whose median answer takes twice the lowest step's.
The findings also give the capacity the lowest step's median makes (lanes
over it): t is timed alone, and a loaded host may answer faster or slower.
A small --max-pending answers the excess with 503 at once instead.

Writes to bench/results/knee-<stamp>/ (or --out): per step Locust's CSVs
and every answer (answers.csv: sent, ms, status), knee.json (the
predictions and a row per step), knee.md (the table and the findings) and
knee.png (latency and answered/rejected per second against the offered rate,
the predicted capacity marked).
"""

from __future__ import annotations

import argparse
import contextlib
import csv
import json
import math
import statistics
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

if __package__ in (None, ""):  # run as `python bench/knee.py`: make the `bench` package importable
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.charts import load as load_charts
from bench.lib.args import OUT, SERVER_ARGS
from bench.lib.command import check_ranges, new_parser, run_command
from bench.lib.load_findings import knee_findings
from bench.lib.locust import INSTALL, Crowd, lab_pool, locust_command, run_locust, text
from bench.lib.optional import need_module
from bench.lib.results import new_results_dir
from bench.lib.servers import own_server
from lab.race import ideal
from lab.race.engine import server_facts, solo_samples

COLUMNS = ("mode", "max_pending", "x", "offered_rps", "sent", "ok", "rejected", "other", "ok_rps", "rejected_rps",
           "p50_ms", "p95_ms", "max_ms")  # fmt: skip
MAX_USERS = 2000  # one per request of a step: past this, Locust's own CPU would be part of the measurement


def _floats(text: str) -> list[float]:
    return [float(x) for x in text.split(",") if x.strip()]


def build_parser() -> argparse.ArgumentParser:
    parser = new_parser("bench.knee", __doc__)
    parser.add_argument("--modes", default="threading,processing", help="lab modes (default: threading,processing)")
    parser.add_argument("--n", type=int, default=3_000_000, help="count's n (default: 3,000,000)")
    parser.add_argument("--steps", type=_floats, default=[0.5, 0.8, 1.0, 1.2, 1.5, 2.0], metavar="X,X",
                        help="offered rates, multiples of the predicted capacity (default: %(default)s)")  # fmt: skip
    parser.add_argument("--step-seconds", type=float, default=10.0, help="seconds of arrivals a step (default: 10)")
    parser.add_argument("--bounds", default="10000,4", help="--max-pending of each server (default: 10000,4)")
    parser.add_argument("--solo-runs", type=int, default=5, help="requests alone that t is the median of (5)")
    OUT.add(parser, help="results folder (default: bench/results/knee-<stamp>/)")
    SERVER_ARGS.add(parser, help="more flags for every server this run starts")
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    check_ranges(parser, ("--solo-runs", args.solo_runs, 1, 50), ("--n", args.n, 1, 10**9))
    if not args.steps or any(x <= 0 for x in args.steps):
        parser.error("--steps must be positive multiples")
    try:
        args.bounds = [int(b) for b in args.bounds.split(",") if b.strip()]
    except ValueError:
        parser.error("--bounds must be whole numbers")
    need_module("locust", "Locust", INSTALL, tool="bench.knee")
    return run_command(lambda: _run(args))


def predict(base: str, mode: str, path: str, runs: int) -> dict[str, Any]:
    """lanes / t: t the median of `runs` requests alone (after one to warm up), lanes from the registry."""
    solo_samples(f"{base}{path}", 1, 60.0)
    samples, _ = solo_samples(f"{base}{path}", runs, 60.0)
    t = statistics.median(samples)
    lanes = ideal.lanes(mode, "count", server_facts(base, 30.0)) or 1
    return {"lanes": lanes, "t_s": round(t, 4), "capacity_rps": round(lanes / t, 2)}


def drain(base: str, mode: str, timeout: float = 300.0) -> None:
    """Wait until the mode's pool runs nothing and queues nothing: a step starts on an idle server."""
    pool, deadline = lab_pool(base, mode), time.monotonic() + timeout
    while pool() != (0, 0):
        if time.monotonic() > deadline:
            raise RuntimeError(f"{base}: the {mode} pool still busy after {timeout:g} s")
        time.sleep(0.5)


def step(base: str, path: str, rate: float, seconds: float, prefix: Path) -> dict[str, Any]:
    """`rate` requests/s for `seconds` from Locust; every answer's numbers in a row."""
    sent = max(1, math.ceil(rate * seconds))
    crowd = Crowd(users=min(sent, MAX_USERS), requests=sent, arrivals=rate, seconds=int(seconds * 6 + 60))
    run_locust(locust_command(crowd, path, base, prefix), Path(f"{prefix}_locust.log"))
    with Path(f"{prefix}_answers.csv").open() as file:
        answers = [(float(r["sent_s"]), float(r["ms"]), int(r["status"])) for r in csv.DictReader(file)]
    ok = sorted(ms for _, ms, status in answers if status == 200)
    rejected = sum(1 for _, _, status in answers if status == 503)
    first = min((at for at, _, _ in answers), default=0.0)
    window = max((at + ms / 1000 for at, ms, _ in answers), default=first) - first
    return {
        "offered_rps": round(rate, 2), "sent": sent, "ok": len(ok), "rejected": rejected,
        "other": len(answers) - len(ok) - rejected, "unanswered": sent - len(answers),
        "ok_rps": round(len(ok) / window, 2) if window > 0 else 0.0,
        "rejected_rps": round(rejected / (sent / rate), 2),
        "p50_ms": _pct(ok, 50), "p95_ms": _pct(ok, 95), "max_ms": ok[-1] if ok else None,
    }  # fmt: skip


def _pct(values: list[float], q: int) -> float | None:
    if not values:
        return None
    return round(values[min(len(values) - 1, math.ceil(q / 100 * len(values)) - 1)], 1)


def _run(args: argparse.Namespace) -> None:
    out = args.out or new_results_dir("knee-")
    out.mkdir(parents=True, exist_ok=True)
    rows: list[dict[str, Any]] = []
    predicted: dict[str, dict[str, Any]] = {}
    for mode in [m.strip() for m in args.modes.split(",") if m.strip()]:
        path = f"/{mode}/count?n={args.n}"
        with contextlib.ExitStack() as stack:
            bases = {bound: stack.enter_context(own_server(f"--max-pending {bound} {args.server_args}", "knee-"))
                     for bound in args.bounds}  # fmt: skip
            model = predicted[mode] = predict(bases[args.bounds[0]].url, mode, path, args.solo_runs)
            print(f"/{mode}: {model['lanes']} lane(s) / t {model['t_s']} s = {model['capacity_rps']} req/s predicted",
                  file=sys.stderr)  # fmt: skip
            # Each step on every server in turn: a slow minute of the host falls on all alike.
            for x in args.steps:
                for bound, server in bases.items():
                    drain(server.url, mode)
                    rate = x * model["capacity_rps"]
                    print(f"  {rate:.1f} req/s ({x:g}x) on --max-pending {bound}", file=sys.stderr)
                    prefix = out / f"{mode}-x{x:g}-pending{bound}"
                    rows.append({"mode": mode, "max_pending": bound, "bound": f"--max-pending {bound}", "x": x,
                                 **step(server.url, path, rate, args.step_seconds, prefix)})  # fmt: skip
    _write(args, out, rows, predicted)


def _write(args: argparse.Namespace, out: Path, rows: list[dict[str, Any]], predicted: dict[str, Any]) -> None:
    findings = knee_findings(rows, predicted)
    (out / "knee.json").write_text(json.dumps({"n": args.n, "step_seconds": args.step_seconds, "predicted": predicted,
                                               "rows": rows, "findings": findings}, indent=1) + "\n")  # fmt: skip
    table = text(rows, COLUMNS)
    lines = [f"# Arrivals stepped past capacity, count n={args.n}, {args.step_seconds:g} s a step", "", "```", table,
             "```", "", "## Findings", "", *(f"- {f}" for f in findings)]  # fmt: skip
    (out / "knee.md").write_text("\n".join(lines) + "\n")
    chart = load_charts.knee(out / "knee.png", rows, {m: p["capacity_rps"] for m, p in predicted.items()})
    print(table + "\n\n" + "\n".join(f"- {f}" for f in findings))
    print(f"wrote {out / 'knee.json'}\nwrote {out / 'knee.md'}\nwrote {chart}")


if __name__ == "__main__":
    sys.exit(main())
