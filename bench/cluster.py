"""The distributed mode across a network: hosts in network namespaces, Dask on its own hosts, slow links, cut cables.

    sudo .venv/bin/python -m bench.cluster                 # all three parts (about 15 minutes)
    sudo .venv/bin/python -m bench.cluster --quick         # fewer sizes, rounds and faults (about 5 minutes)
    sudo .venv/bin/python -m bench.cluster --parts faults --faults worker-cut,worker-killed

It builds four hosts on one machine (bench/lib/netns.py: a network
namespace each, joined by a switch, private addresses inside them only): a
scheduler host running `dask scheduler`, two worker hosts running `dask
worker` (one thread each, under a nanny), and the lab's host running
server.py --dask-scheduler tcp://ADDRESS:PORT. Everything uses this
project's venv. The bench's own requests go from threads that enter the
lab's host namespace, so nothing of the network touches the root
namespace. It needs root (namespaces) and iproute2; without them it says so
in one line and exits 2. However it ends (Ctrl-C, SIGTERM, an error), it
kills every process it started and deletes every namespace; a run that was
SIGKILLed leaves names the next run removes.

Parts (--parts):
  overhead     the per-task cost of count?n=1 across hosts, against the embedded
               cluster and the process pool, alternating, in rounds
  granularity  task sizes (count's n) x link rates (tbf on the worker hosts'
               cables) for tasks that carry 1 MB: where shipping stops paying,
               measured and predicted from bytes per task and the rate
  faults       cables cut, processes killed, links throttled, each mid-burst:
               what every request got, when the cluster noticed, when the lab
               served again (bench/lib/faults.py)

Writes cluster.json and cluster.md (and the cluster's logs) under
bench/results/cluster-<stamp>/.
"""

from __future__ import annotations

import argparse
import json
import shutil
import signal
import sys
import tempfile
from collections.abc import Sequence
from pathlib import Path
from typing import Any

if __package__ in (None, ""):  # run as `python bench/cluster.py`: make the `bench` package importable
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.lib.args import NO_FILES, OUT, ROUNDS
from bench.lib.command import check_ranges, new_parser, run_command
from bench.lib.faults import FAULTS, QUICK_FAULTS, Burst, strike
from bench.lib.granularity import Plan, measure
from bench.lib.hosts import ROLES, START_TIMEOUT_S, DaskTimeouts, HostCluster, Reply
from bench.lib.netns import Network, refusal, sweep
from bench.lib.results import machine_facts, new_results_dir
from bench.lib.tables import Column, markdown_table, text_table
from lab.race.stats import median, percentile

PARTS = ("overhead", "granularity", "faults")
TARGETS = (  # (row, lab server, path): the same tiny task three ways
    ("across hosts", "lab", "/distributed/count?n=1"),
    ("embedded cluster", "embedded", "/distributed/count?n=1"),
    ("process pool", "lab", "/processing/count?n=1"),
)
SIZES_MS = (0.0, 1.0, 3.0, 10.0, 30.0, 100.0, 300.0, 1000.0)
QUICK_SIZES_MS = (0.0, 3.0, 30.0, 300.0)
RATES = (None, "100mbit", "10mbit")
FAULT_BURST = "/distributed/sleep?seconds=1"
TIMEOUTS = {"tuned": DaskTimeouts.tuned(), "quick": DaskTimeouts.quick(), "default": DaskTimeouts()}

OVERHEAD_COLUMNS = (
    Column("target", "target", "{}"),
    Column("client_p50_ms", "client p50 ms"),
    Column("range_ms", "rounds' range ms", "{}"),
    Column("server_p50_ms", "in server p50 ms"),
    Column("ratio", "x process pool"),
    Column("failed", "failed", "{:d}"),
)
GRANULARITY_COLUMNS = (
    Column("rate", "link", "{}"),
    Column("size_ms", "task ms", "{:g}"),
    Column("work_ms", "work ms"),
    Column("trip_ms", "trip ms"),
    Column("efficiency", "work / wall", "{:.2f}"),
    Column("bytes_per_task", "bytes / task", "{:,d}"),
)
BREAK_EVEN_COLUMNS = (
    Column("rate", "link", "{}"),
    Column("bytes_per_task", "bytes / task", "{:,d}"),
    Column("link_ms", "bytes / rate ms"),
    Column("predicted_ms", "predicted break-even ms"),
    Column("measured_ms", "measured break-even ms"),
    Column("ratio", "measured / predicted"),
    Column("verdict", "", "{}"),
)
FAULT_COLUMNS = (
    Column("fault", "fault", "{}"),
    Column("sent", "sent", "{:d}"),
    Column("ok", "200", "{:d}"),
    Column("retry_after", "503 + Retry-After", "{:d}"),
    Column("bare_503", "503 bare", "{:d}"),
    Column("timeouts_504", "504", "{:d}"),
    Column("other", "other", "{:d}"),
    Column("unaccounted", "no answer", "{:d}"),
    Column("longest_s", "longest s"),
    Column("bound_s", "bound s", "{:g}"),
    Column("lab_noticed_s", "lab noticed s"),
    Column("dropped_s", "dropped s"),
    Column("serves_again_s", "serves again s"),
    Column("probe_s", "its answer s"),
    Column("whole_again_s", "whole again s"),
)


def build_parser() -> argparse.ArgumentParser:
    parser = new_parser("bench.cluster", __doc__)
    parser.add_argument("--quick", action="store_true", help="fewer task sizes, rounds and faults (about 5 minutes)")
    parser.add_argument("--parts", default=",".join(PARTS), help=f"comma-separated parts (default: {','.join(PARTS)})")
    parser.add_argument("--faults", help=f"comma-separated faults (default: all; --quick: {','.join(QUICK_FAULTS)}); "
                        f"one of {', '.join(FAULTS)}")  # fmt: skip
    ROUNDS.add(parser, help="rounds of the overhead and granularity parts (default: 3; --quick: 1)")
    parser.add_argument("-n", "--requests", type=int, help="overhead: requests per target per round (default: 30; "
                        "--quick: 10)")  # fmt: skip
    parser.add_argument("--job-timeout", type=float, default=15.0, metavar="S",
                        help="the lab's --job-timeout during the faults (default: 15)")  # fmt: skip
    parser.add_argument("--dask-timeouts", choices=tuple(TIMEOUTS), default="tuned",
                        help="tuned: worker-ttl 20s, comm.timeouts.tcp 20s, connect 5s (docs/operating.md); quick: "
                        "5s, 11s, 3s (the tests'); default: Dask's own (5 minutes, 30s, 30s)")  # fmt: skip
    OUT.add(parser, help="folder for the results (default: a new one under bench/results/)")
    NO_FILES.add(parser)
    return parser


def parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    parser = build_parser()
    args = parser.parse_args(argv)
    args.parts = [p.strip() for p in args.parts.split(",") if p.strip()]
    if not args.parts or set(args.parts) - set(PARTS):
        parser.error(f"--parts takes {', '.join(PARTS)} (got {args.parts})")
    names = args.faults.split(",") if args.faults else list(QUICK_FAULTS if args.quick else FAULTS)
    args.faults = [n.strip() for n in names if n.strip()]
    if set(args.faults) - set(FAULTS):
        parser.error(f"--faults takes {', '.join(FAULTS)} (got {args.faults})")
    args.rounds = args.rounds or (1 if args.quick else 3)
    args.requests = args.requests or (10 if args.quick else 30)
    check_ranges(parser, ("--rounds", args.rounds, 1, 20), ("-n", args.requests, 1, 1000))
    if not 2 <= args.job_timeout <= 600:
        parser.error("--job-timeout must be between 2 and 600")
    return args


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_args(argv)
    reason = refusal()
    if reason is not None:
        print(f"error: bench.cluster needs {reason}", file=sys.stderr)
        return 2
    signal.signal(signal.SIGHUP, signal.default_int_handler)  # a closed terminal stops it cleanly too
    return run_command(lambda: run(args))


def run(args: argparse.Namespace) -> None:
    for name in sweep():
        print(f"removed {name}, left by a run that was killed", file=sys.stderr)
    out = None if args.no_files else (args.out or new_results_dir("cluster-"))
    logs = Path(tempfile.mkdtemp(prefix="cluster-logs-")) if out is None else out / "logs"
    timeouts = TIMEOUTS[args.dask_timeouts]
    doc: dict[str, Any] = {"dask_timeouts": timeouts.describe(), "job_timeout": args.job_timeout}
    try:
        with Network(ROLES) as net, HostCluster(net, logs, timeouts) as hosts:
            print(f"hosts: {', '.join(f'{h.role} {h.address}' for h in net.hosts.values())}", file=sys.stderr)
            hosts.start(["--process-pool", "1", "--job-timeout", f"{args.job_timeout:g}"])
            hosts.wait_for_workers(2)
            doc["scheduler"] = hosts.scheduler
            _parts(args, hosts, timeouts, doc)
    finally:
        if out is None:
            shutil.rmtree(logs, ignore_errors=True)
    doc["machine"] = machine_facts(None, command=" ".join(["python -m bench.cluster", *sys.argv[1:]]))
    if out is not None:
        (out / "cluster.json").write_text(json.dumps(doc, indent=1) + "\n")
        (out / "cluster.md").write_text(report(doc, markdown_table) + "\n")
        print(f"wrote {out / 'cluster.json'}\nwrote {out / 'cluster.md'}")


def _parts(args: argparse.Namespace, hosts: HostCluster, timeouts: DaskTimeouts, doc: dict[str, Any]) -> None:
    """Each part asked for, its table printed as soon as it is measured."""
    if "overhead" in args.parts:
        hosts.start_lab(["--process-pool", "1", "--dask-workers", "2"], "embedded", external=False)
        try:
            doc["overhead"] = per_task(hosts, args.requests, args.rounds)
        finally:
            hosts.stop_lab("embedded")  # its two workers would share the cores with what comes next
        print(text_table(doc["overhead"], OVERHEAD_COLUMNS), flush=True)
    if "granularity" in args.parts:
        plan = Plan(QUICK_SIZES_MS if args.quick else SIZES_MS, RATES, 2 if args.quick else 3, args.rounds)
        doc["granularity"] = measure(hosts, plan)
        print(text_table(doc["granularity"]["rows"], GRANULARITY_COLUMNS), flush=True)
        print(text_table(doc["granularity"]["break_even"], BREAK_EVEN_COLUMNS), flush=True)
    if "faults" in args.parts:
        burst = Burst(FAULT_BURST, 10, args.job_timeout, timeouts.detection_s())
        doc["faults"] = []
        for name in args.faults:
            doc["faults"].append(strike(hosts, FAULTS[name], burst))
            print(text_table(doc["faults"][-1:], FAULT_COLUMNS), flush=True)


def per_task(hosts: HostCluster, requests: int, rounds: int) -> list[dict[str, Any]]:
    """Each target's cost for a task that does no work: one request at a time, round-robin, in rounds."""
    for name, lab, path in TARGETS:
        for i in range(5):  # unmeasured: pools and clusters warm (the embedded cluster starts on the first)
            _checked(hosts.get(f"{path}&_=warm{i}", START_TIMEOUT_S, lab), name)
    per_round: dict[str, list[tuple[float, float]]] = {name: [] for name, _, _ in TARGETS}
    failed = dict.fromkeys(per_round, 0)
    for r in range(rounds):
        samples: dict[str, list[Reply]] = {name: [] for name in per_round}
        for i in range(requests):
            for name, lab, path in TARGETS:
                samples[name].append(hosts.get(f"{path}&_={r}-{i}", 60, lab))
        for name, replies in samples.items():
            ok = [reply for reply in replies if reply.status == 200]
            failed[name] += len(replies) - len(ok)
            client = percentile([reply.seconds * 1000 for reply in ok], 0.5)
            server = percentile([reply.body["timing"]["total_ms"] - reply.body["timing"]["run_ms"] for reply in ok],
                                0.5)  # fmt: skip
            if client is not None and server is not None:
                per_round[name].append((client, server))
    pool = median([c for c, _ in per_round["process pool"]])
    return [_cost_row(name, per_round[name], failed[name], pool) for name in per_round]


def _cost_row(name: str, rounds: list[tuple[float, float]], failed: int, pool: float) -> dict[str, Any]:
    clients = [client for client, _ in rounds]
    middle = median(clients)
    return {
        "target": name,
        "client_p50_ms": round(middle, 2),
        "range_ms": f"{min(clients):.2f}-{max(clients):.2f}",
        "server_p50_ms": round(median([server for _, server in rounds]), 2),
        "ratio": round(middle / pool, 2),
        "failed": failed,
        "rounds": [round(c, 3) for c in clients],
    }


def _checked(reply: Reply, name: str) -> None:
    if reply.status != 200:
        raise RuntimeError(f"{name} answered {reply.status}: {json.dumps(reply.body)[:300]}")


def report(doc: dict[str, Any], table: Any = markdown_table) -> str:
    """The run's tables, in order, each under a heading."""
    parts = [f"Dask timeouts: {doc['dask_timeouts']}; the lab's --job-timeout {doc['job_timeout']:g} s."]
    if "overhead" in doc:
        parts += ["## Per-task cost (count?n=1)", table(doc["overhead"], OVERHEAD_COLUMNS)]
    if "granularity" in doc:
        parts += [f"## Granularity (tasks carrying {doc['granularity']['payload_bytes']:,d} bytes)",
                  table(doc["granularity"]["rows"], GRANULARITY_COLUMNS),
                  table(doc["granularity"]["break_even"], BREAK_EVEN_COLUMNS)]  # fmt: skip
    if "faults" in doc:
        parts += ["## Faults", table(doc["faults"], FAULT_COLUMNS)]
    return "\n\n".join(parts)


if __name__ == "__main__":
    sys.exit(main())
