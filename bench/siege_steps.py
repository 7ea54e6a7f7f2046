"""The steps bench/siege.sh hands to Python: wait for a server, warm up and time solo runs, parse siege, report.

    python -m bench.siege_steps ready   --log FILE --pid PID          prints the server's base URL
    python -m bench.siege_steps modes   --base URL                    prints the server's modes, one per line
    python -m bench.siege_steps prepare --base URL --name N --mode M --dir D   writes D/N.plan.json, prints the URL
    python -m bench.siege_steps solo-after --name N --dir D          more solo runs, after siege
    python -m bench.siege_steps report  --dir D -c 10 -r 1            writes summary.json/.md, prints the table
    python -m bench.siege_steps machine --dir D --flags URL=FLAGS     writes machine.json

The ideal comes from lab/race/ideal.py (one implementation, from the modes' capacity in lab/modes/).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

if __package__ in (None, ""):  # run as `python bench/siege_steps.py`
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.lib import rounds
from bench.lib.args import CONCURRENCY, PARAM, REPS, SOLO_RUNS, WARMUP, WORKLOAD, Flag
from bench.lib.command import new_parser, run_command
from bench.lib.results import machine_facts
from bench.lib.servers import wait_ready
from bench.lib.shapes import sentence
from bench.lib.siege import SIEGERC_LINES, Line, StepError, parse_summary, request_lines
from bench.lib.tables import COLUMNS, SPREAD_COLUMN, markdown_table, text_table
from lab.modes.registry import MODES
from lab.race.engine import get, mode_url, server_facts, server_modes, solo_samples, warm_up, with_tag
from lab.race.ideal import cpu_ideal_makespan, ideal_makespan, lanes
from lab.race.stats import median, ratio
from lab.settings import param_pair

TIMEOUT_S = 600.0
# siege's numbers and the ideal, then how the requests spread over server processes.
TABLE = (*COLUMNS, SPREAD_COLUMN)


def summary_row(
    plan: dict[str, Any], siege: dict[str, Any], concurrency: int, reps: int, lines: Sequence[Line] = ()
) -> dict[str, Any]:
    """One summary.json row: siege's numbers, the ideal from the plan's solo time, and context; with siege's
    per-request `lines`, each response time in the order they came back."""
    transactions = int(siege["transactions"])
    # siege reports an HTTP error either as a transaction that was not
    # "successful" or under "failed_transactions" (it depends on the status);
    # socket errors are failed too. Every one of them is a failure here.
    http_errors = transactions - int(siege.get("successful_transactions", transactions))
    failed = int(siege.get("failed_transactions", 0)) + http_errors
    ideal = ideal_makespan(plan["mode"], plan["workload"], plan["server"], plan["solo_s"], concurrency, reps=reps)
    cpu_ideal = cpu_ideal_makespan(plan["mode"], plan["workload"], plan["server"], siege_cpu_s(plan), concurrency,
                                   reps=reps)  # fmt: skip
    elapsed = float(siege["elapsed_time"])
    row = {
        "endpoint": plan["name"],
        "elapsed_s": elapsed,
        "mean_s": float(siege["response_time"]),
        "shortest_s": float(siege["shortest_transaction"]),
        "longest_s": float(siege["longest_transaction"]),
        "transactions": transactions,
        "failed": failed,
        "ideal_s": round(ideal, 4),
        "ratio": ratio(elapsed, ideal),
    }
    server = plan["server"]
    # The ideal from siege's runs' own CPU time (lab/race/ideal.py): unmoved by the host's speed.
    row |= {"cpu_ideal_s": None if cpu_ideal is None else round(cpu_ideal, 4),
            "cpu_ratio": ratio(elapsed, cpu_ideal) if cpu_ideal else None}  # fmt: skip
    return row | {
        "url": plan["url"],
        "mode": plan["mode"],
        "workload": plan["workload"],
        "params": plan["params"],
        "concurrency": concurrency,
        "reps": reps,
        "solo_s": round(plan["solo_s"], 4),
        "solo_samples_s": [round(s, 4) for s in plan["solo_samples_s"]],
        "solo_before_s": [round(s, 4) for s in plan.get("solo_before_s", plan["solo_samples_s"])],
        "solo_after_s": [round(s, 4) for s in plan.get("solo_after_s", [])],
        "cores": int(server["cpu_count"]),
        "processes": int(server["processes"]),
        "lanes": lanes(plan["mode"], plan["workload"], server),
        "spread": siege_spread(plan),
        "siege": {k: siege[k] for k in sorted(siege)},
        "responses_s": [line.seconds for line in lines],
        # Which endpoint this is a round of, and which round (siege.sh --rounds).
        "group": plan.get("group", plan["name"]),
        "round": plan.get("round", 1),
    }


def prepare(args: argparse.Namespace) -> int:
    """Check and warm the endpoint up, time solo runs, record what the report needs for the ideal."""
    base = args.base.rstrip("/")
    runs_workloads = MODES[args.mode].runs_workloads
    params = dict(args.param) if runs_workloads else {}
    if not runs_workloads and args.delay:
        params["delay"] = args.delay
    url = mode_url(base, args.mode, args.workload or None, params)
    status, body, _, _ = get(with_tag(url, "check"), args.timeout)
    if status != 200 or not isinstance(body, dict):
        raise StepError(f"{url} answered {status}: {json.dumps(body)[:300]}")
    # After that first request: it may have started what the mode runs on (an embedded Dask cluster).
    server = server_facts(base, args.timeout)
    if runs_workloads and args.warmup > 0:  # waiting for the upstream needs no warming
        warm_up(url, int(server["cpu_count"]), args.warmup, args.timeout)
    samples, body = solo_samples(url, args.solo_runs, args.timeout)
    counts, cpu = served_by_process(base, args.mode, args.timeout)
    plan = {
        "name": args.name,
        "group": args.group or args.name,
        "round": args.round,
        "base": base,
        "url": url,
        "mode": args.mode,
        # The reply names the workload and params actually run, defaults included.
        "workload": body["workload"],
        "params": body["params"],
        "server": server,
        "solo_before_s": samples,
        "solo_after_s": [],
        "solo_samples_s": samples,
        "solo_s": median(samples),
        "prepared_at": time.time(),
        # Requests of this mode each server process had answered before siege (its spread is the difference),
        # and the CPU seconds and number of the runs that reported one (siege's runs' own, by difference).
        "served_before": counts,
        "cpu_before": cpu,
    }
    _save(args.dir, plan)
    print(url)
    return 0


def solo_after(args: argparse.Namespace) -> int:
    """Time solo runs again after siege; t becomes the median of the runs before and after.

    Bracketing the measurement matters on real machines: a CPU that has been
    idle runs slower than one a few seconds into sustained load, so solo runs
    taken only before the load overstate t.
    """
    path = args.dir / f"{args.name}.plan.json"
    plan = json.loads(path.read_text())
    plan["served_after"], plan["cpu_after"] = served_by_process(plan["base"], plan["mode"], args.timeout)
    after, _ = solo_samples(plan["url"], args.solo_runs, args.timeout)
    plan["solo_after_s"] = after
    plan["solo_samples_s"] = plan["solo_before_s"] + after
    plan["solo_s"] = median(plan["solo_samples_s"])
    _save(args.dir, plan)
    return 0


def served_by_process(base: str, mode: str, timeout: float) -> tuple[dict[str, int], list[float]]:
    """From /stats: requests of `mode` each server process has answered so far (pid -> count), and
    [CPU seconds, runs] of the runs that reported their CPU time, all processes together."""
    status, body, _, _ = get(f"{base}/stats", timeout)
    if status != 200 or not isinstance(body, dict):
        raise StepError(f"{base}/stats answered {status}")
    entries = [p["requests"].get(mode, {}) for p in body["processes"]]
    counts = {str(p["pid"]): int(e.get("count", 0)) for p, e in zip(body["processes"], entries, strict=True)}
    return counts, [sum(e.get("run_cpu_s", 0.0) for e in entries), sum(e.get("timed", 0) for e in entries)]


def siege_cpu_s(plan: dict[str, Any]) -> float | None:
    """The mean CPU time of siege's runs (by difference of the sums around it); None where they reported none."""
    before, after = plan.get("cpu_before"), plan.get("cpu_after")
    if not before or not after or after[1] <= before[1]:
        return None
    cpu_s: float = (after[0] - before[0]) / (after[1] - before[1])
    return cpu_s


def siege_spread(plan: dict[str, Any]) -> dict[str, int]:
    """The siege run's requests per server process: what each answered between before and after."""
    before, after = plan.get("served_before", {}), plan.get("served_after", {})
    spread = {pid: count - before.get(pid, 0) for pid, count in after.items()}
    return dict(sorted(((pid, n) for pid, n in spread.items() if n > 0), key=lambda item: -item[1]))


def _save(folder: Path, plan: dict[str, Any]) -> None:
    (folder / f"{plan['name']}.plan.json").write_text(json.dumps(plan, indent=1) + "\n")


def _plans(folder: Path) -> list[dict[str, Any]]:
    plans = [json.loads(p.read_text()) for p in folder.glob("*.plan.json")]
    if not plans:
        raise StepError(f"no *.plan.json in {folder}: nothing was measured")
    return sorted(plans, key=lambda plan: plan["prepared_at"])


def report(args: argparse.Namespace) -> int:
    """summary.json and summary.md from every endpoint measured; the table on stdout."""
    rows = []
    for plan in _plans(args.dir):
        out, err = (args.dir / f"{plan['name']}.siege.{part}" for part in ("out", "stderr"))
        if not out.exists() or not err.exists():
            raise StepError(f"{out} is missing: siege did not run for {plan['name']}")
        lines = request_lines(out.read_text(errors="replace"))
        siege = parse_summary(err.read_text(errors="replace"))
        rows.append(summary_row(plan, siege, args.concurrency, args.reps, lines))
        # siege's own lines, as the article shows them: one per request, in the order they came back.
        print(f"{plan['name']}: siege -c {args.concurrency} -r {args.reps} {plan['url']}")
        print("\n".join(f"  {line.text}" for line in lines) or "  (siege printed no request lines)")
        print()
    told = sentence([row for row in rows if row["round"] == 1])
    (args.dir / "summary.json").write_text(json.dumps(rows, indent=1) + "\n")
    (args.dir / "summary.md").write_text(_markdown(rows, args, told))
    print(text_table(rows, TABLE))
    if told:
        print(f"\n{told}")
    if (over := rounds.save(rows, "group", args.dir / "rounds.json")) is not None:
        print(f"\n{over}")
    return 0


def _markdown(rows: list[dict[str, Any]], args: argparse.Namespace, told: str) -> str:
    first = rows[0]
    return "\n".join(
        [
            f"# siege -c {args.concurrency} -r {args.reps}, {time.strftime('%Y-%m-%d %H:%M')}",
            "",
            f"{first['cores']} cores. Times in seconds; `ideal` is the best makespan possible on this machine "
            "for each endpoint (lab/race/ideal.py; t is the median of solo requests before and after siege); "
            "`ratio` = elapsed / ideal.",
            "",
            markdown_table(rows, TABLE),
            "",
            *([told, ""] if told else []),
            "| endpoint | URL | workload | solo s (t) | lanes | server processes |",
            "|:---|:---|:---|---:|---:|---:|",
            *(
                f"| {r['endpoint']} | `{r['url']}` | {_workload(r)} | {r['solo_s']:.3f} | {r['lanes'] or '-'} "
                f"| {r['processes']} |"
                for r in rows
            ),
            "",
        ]
    )


def _workload(row: dict[str, Any]) -> str:
    params = ", ".join(f"{k}={v}" for k, v in row["params"].items())
    return f"{row['workload']} ({params})" if params else row["workload"]


def machine(args: argparse.Namespace) -> int:
    """machine.json: the machine, the libraries, BLAS threads, and the servers measured."""
    flags = dict(args.flags)
    servers: dict[str, Any] = {}
    for plan in _plans(args.dir):
        entry = servers.setdefault(
            plan["base"],
            {
                "flags": flags.get(plan["base"], "(a server already running: flags unknown)"),
                "facts": plan["server"],
                "endpoints": [],
            },
        )
        entry["endpoints"].append(plan["name"])
    native = next((entry["facts"].get("native_threads") for entry in servers.values()), None)
    facts = machine_facts(native, servers=servers, siege_rc=_read(args.dir / "siegerc"), bench_argv=args.argv)
    (args.dir / "machine.json").write_text(json.dumps(facts, indent=1) + "\n")
    return 0


def _read(path: Path) -> str | None:
    return path.read_text() if path.exists() else None


def siegerc(args: argparse.Namespace) -> int:
    """DIR/siegerc: the settings siege runs with (SIEGERC_LINES)."""
    (args.dir / "siegerc").write_text(SIEGERC_LINES)
    return 0


def ready(args: argparse.Namespace) -> int:
    """Wait until the server `--pid` (started with setsid) serves on every process; print its URL."""
    try:
        if os.getsid(args.pid) != args.pid:
            # Stopping the server means killing its process group: it must lead its own.
            raise StepError(f"server pid {args.pid} is not a session leader: start it with setsid")
    except ProcessLookupError:
        raise StepError(f"server pid {args.pid} is not running; its log: {args.log}") from None
    print(wait_ready(args.log, args.pid, args.timeout))
    return 0


def modes(args: argparse.Namespace) -> int:
    """The modes the server at --base can run the workload in (its /modes), one per line; the others on stderr."""
    try:
        runnable, skipped = server_modes(args.base, args.workload or None, args.timeout)
    except RuntimeError as error:
        raise StepError(str(error)) from None
    for why in skipped:
        print(f"skipping {why}", file=sys.stderr)
    for mode in runnable:
        print(mode)
    return 0


# The flags several steps take.
DIR = Flag("--dir", type=Path, required=True)
BASE = Flag("--base", required=True, help="server base URL")
STEP_TIMEOUT = Flag("--timeout", type=float, default=TIMEOUT_S)


def build_parser() -> argparse.ArgumentParser:
    parser = new_parser("bench.siege_steps", __doc__)
    steps = parser.add_subparsers(dest="step", required=True)

    def step(name: str, run: Callable[[argparse.Namespace], int], help: str) -> argparse.ArgumentParser:
        sub = steps.add_parser(name, help=help)
        sub.set_defaults(run=run)
        return sub

    sub = step("ready", ready, "wait for a server started with setsid; print its base URL")
    sub.add_argument("--log", type=Path, required=True)
    sub.add_argument("--pid", type=int, required=True)
    STEP_TIMEOUT.add(sub, default=180.0)

    sub = step("modes", modes, "print the modes a server can run a workload in, one per line")
    BASE.add(sub)
    WORKLOAD.add(sub, default="", help="workload (default: each mode's own)")
    STEP_TIMEOUT.add(sub, default=30.0)

    sub = step("prepare", prepare, "warm up one endpoint and time solo requests")
    BASE.add(sub)
    sub.add_argument("--name", required=True, help="endpoint name in the table and file names")
    sub.add_argument("--group", default="", help="the endpoint this is a round of (default: --name)")
    sub.add_argument("--round", type=int, default=1, help="which round (siege.sh --rounds)")
    sub.add_argument("--mode", required=True, choices=list(MODES))
    WORKLOAD.add(sub, default="", help="workload (default: the route's own)")
    PARAM.add(sub)
    sub.add_argument("--delay", default="", help="/async upstream delay in seconds")
    SOLO_RUNS.add(sub)
    WARMUP.add(sub, default=3.0, help="seconds of load before the solo runs")
    STEP_TIMEOUT.add(sub)
    DIR.add(sub)

    sub = step("solo-after", solo_after, "time solo runs again after siege (t: median of all)")
    sub.add_argument("--name", required=True, help="the endpoint prepared before")
    SOLO_RUNS.add(sub)
    STEP_TIMEOUT.add(sub)
    DIR.add(sub)

    sub = step("report", report, "summary.json, summary.md and the table")
    DIR.add(sub)
    CONCURRENCY.add(sub, required=True)
    REPS.add(sub, required=True)

    sub = step("machine", machine, "machine.json")
    DIR.add(sub)
    sub.add_argument("--flags", action="append", type=param_pair, default=[], metavar="BASE_URL=FLAGS",
                     help="the flags the server at BASE_URL was started with (repeatable)")  # fmt: skip
    sub.add_argument("--argv", default="", help="the bench command line, recorded as is")

    DIR.add(step("siegerc", siegerc, "write the rc file siege runs with"))
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    # siege.sh stops a step with SIGTERM when it is itself stopped: the step just goes.
    run: Callable[[argparse.Namespace], int] = args.run
    return run_command(lambda: run(args), sigterm=False)


if __name__ == "__main__":
    sys.exit(main())
