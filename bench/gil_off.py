"""GIL on / GIL off: the same races on a lab with a GIL and on one without (free-threaded 3.13t), alternating.

    python -m bench.gil_off                          # .venv-3.13 against .venv-ft, count and predict, 3 rounds
    python -m bench.gil_off --gil .venv-3.13/bin/python --ft .venv-ft/bin/python --rounds 5 -p count:n=5000000

Two labs started here, one on each Python, with the same flags (`make install
PYTHON=...` and `make install-ft` make their venvs). Each round races every
workload in /threading and in /processing (bench.race's engine: -c requests
released together, one connection each, solo runs first for the single-run
time t) on both labs back to back, their order flipped each round
(bench/lib/alternate.py). Per lab and workload it prints each round's
makespan of ten /threading over ten /processing and their median: near 1
where threads compute in parallel, as processes do; about the cores' count
where a GIL makes them take turns. And the single-request cost: t on the
free-threaded lab over t on the GIL lab, per mode, round by round. Writes
gil_off.json under bench/results/gil-off-<stamp>/ with both labs'
interpreters (/stats server.interpreter), the machine and the commit.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
from collections.abc import Sequence
from dataclasses import asdict
from pathlib import Path
from typing import Any

from bench.lib.alternate import alternate, ratios
from bench.lib.command import check_ranges, new_parser, run_command
from bench.lib.results import machine_facts, new_results_dir
from bench.lib.servers import LocalServer
from lab import ROOT
from lab.race.data import RaceSpec
from lab.race.engine import get, race

SIDES = ("gil", "ft")
MODES = ("threading", "processing")
# Sized for a few tenths of a second a run on a 2-core VM: 24 races in about two minutes.
PARAMS = {"count": {"n": "3000000"}, "predict": {"rows": "20000"}}


def build_parser() -> argparse.ArgumentParser:
    parser = new_parser("bench.gil_off", __doc__)
    parser.add_argument(
        "--gil",
        default=str(ROOT / ".venv-3.13/bin/python"),
        metavar="PYTHON",
        help="the Python with a GIL (default: .venv-3.13's)",
    )
    parser.add_argument(
        "--ft",
        default=str(ROOT / ".venv-ft/bin/python"),
        metavar="PYTHON",
        help="the free-threaded Python (default: .venv-ft's, make install-ft)",
    )
    parser.add_argument("--workload", default="count,predict", help="workloads, comma-separated (default: %(default)s)")
    parser.add_argument(
        "-p",
        "--param",
        action="append",
        default=[],
        metavar="WORKLOAD:NAME=VALUE",
        help="a workload's param, repeatable (default: count:n=3000000, predict:rows=20000)",
    )
    parser.add_argument("-c", "--concurrency", type=int, default=10, help="requests at once (default: 10)")
    parser.add_argument("--rounds", type=int, default=3, help="alternating rounds (default: 3)")
    parser.add_argument(
        "--server-args", default="--thread-pool 10 --process-pool 2", help="flags for both labs (default: %(default)s)"
    )
    parser.add_argument("--out", type=Path, help="folder for gil_off.json (default: bench/results/gil-off-<stamp>/)")
    return parser


def parse_params(parser: argparse.ArgumentParser, pairs: Sequence[str]) -> dict[str, dict[str, str]]:
    params = {name: dict(values) for name, values in PARAMS.items()}
    for pair in pairs:
        workload, colon, rest = pair.partition(":")
        name, equals, value = rest.partition("=")
        if not (colon and equals and workload and name):
            parser.error(f"-p wants WORKLOAD:NAME=VALUE, not {pair!r}")
        params.setdefault(workload, {})[name] = value
    return params


def interpreter(base: str) -> dict[str, Any]:
    status, body, _, _ = get(f"{base}/stats", 30)
    if status != 200 or not isinstance(body, dict):
        raise RuntimeError(f"{base}/stats answered {status}")
    return dict(body["server"]["interpreter"])


def makespans(rows: Sequence[dict[str, Any]]) -> dict[str, dict[str, Any]]:
    """Per lab and workload: each round's elapsed of /threading over /processing, and their median."""
    found: dict[str, dict[str, Any]] = {}
    for side in SIDES:
        for workload in sorted({row["workload"] for row in rows}):
            by_round: dict[int, dict[str, float]] = {}
            for row in rows:
                if row["side"] == side and row["workload"] == workload and not row["failed"]:
                    by_round.setdefault(row["round"], {})[row["mode"]] = row["elapsed_s"]
            each = [round(p["threading"] / p["processing"], 3) for _, p in sorted(by_round.items()) if len(p) == 2]
            found[f"{side} {workload}"] = {"rounds": each, "median": statistics.median(each) if each else None}
    return found


def measure(args: argparse.Namespace, params: dict[str, dict[str, str]]) -> None:
    workloads = [w for w in args.workload.split(",") if w]
    items = [(workload, mode) for workload in workloads for mode in MODES]
    with tempfile.TemporaryDirectory(prefix="gil-off-") as tmp:
        flags = args.server_args.split()
        pythons = {"gil": args.gil, "ft": args.ft}
        servers = {side: LocalServer(flags, Path(tmp) / f"{side}.log", python=pythons[side]) for side in SIDES}
        with servers["gil"], servers["ft"]:
            labs = {side: interpreter(server.url) for side, server in servers.items()}
            if labs["ft"]["gil_enabled"]:
                print(f"warning: the ft lab runs with its GIL on ({labs['ft']['gil_enabled_by']})", file=sys.stderr)

            def one(item: tuple[str, str], side: str) -> dict[str, Any]:
                workload, mode = item
                spec = RaceSpec(
                    servers[side].url,
                    mode,
                    workload,
                    params.get(workload, {}),
                    args.concurrency,
                    measure_capacity=False,
                )
                summary = asdict(race(spec)[0])
                keep = ("elapsed_s", "solo_s", "ratio", "failed", "cpu_ratio")
                return {"workload": workload, "mode": mode, **{key: summary.get(key) for key in keep}}

            def progress(row: dict[str, Any]) -> None:
                took = f"{row['elapsed_s']:.3f} s for {args.concurrency}, t {row['solo_s']:.3f} s"
                name = f"{row['side']:>3} {row['workload']:>8} {row['mode']:>10}"
                print(f"round {row['round']} {name}: {took}", file=sys.stderr)

            rows = alternate(items, SIDES, args.rounds, one, progress)
    solo = ratios(rows, "solo_s", ("ft", "gil"), lambda row: (row["workload"], row["mode"]))
    doc = {
        "labs": {side: {"python": pythons[side], "interpreter": labs[side]} for side in SIDES},
        "params": {w: params.get(w, {}) for w in workloads},
        "concurrency": args.concurrency,
        "server_args": args.server_args,
        "rows": rows,
        "threading_over_processing": makespans(rows),
        "ft_over_gil_solo": {f"{w} {m}": v for (w, m), v in solo.items()},
        "machine": machine_facts(None),
    }
    c = args.concurrency
    print(f"\n{c} /threading over {c} /processing, median of {args.rounds} rounds (and each round):")
    for name, figure in doc["threading_over_processing"].items():
        print(f"  {name:>16}: {figure['median']}  {figure['rounds']}")
    print("single request t, free-threaded over GIL:")
    for name, figure in doc["ft_over_gil_solo"].items():
        print(f"  {name:>20}: {figure['median']}  {figure['rounds']}")
    out = args.out or new_results_dir("gil-off-")
    out.mkdir(parents=True, exist_ok=True)
    (out / "gil_off.json").write_text(json.dumps(doc, indent=1) + "\n")
    print(f"wrote {out / 'gil_off.json'}")


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    check_ranges(parser, ("-c", args.concurrency, 1, 200), ("--rounds", args.rounds, 1, 20))
    params = parse_params(parser, args.param)
    for flag, python in (("--gil", args.gil), ("--ft", args.ft)):
        if not Path(python).exists():
            print(f"error: {flag} {python} does not exist (make install PYTHON=...; make install-ft)", file=sys.stderr)
            return 2
    return run_command(lambda: measure(args, params))


if __name__ == "__main__":
    sys.exit(main())
