"""The lab page's race as a program of its own: its events as JSON lines on stdout (EVENTS in lab/race/engine.py).

    python -m lab.race --url http://127.0.0.1:8000 --mode threading --workload count -p n=2000000 -c 10

handlers/race.py starts it for the page and relays each line as a WebSocket
message. A process apart from the server, so that the clients' own work
neither holds the server's GIL nor waits for its event loop. A race that
cannot run ends with one {"event": "error"} line and exit status 1.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Sequence

from lab.race.data import Event, RaceSpec
from lab.race.engine import race
from lab.settings import param_pair

# The probes reported as one "pings" event per this many seconds: the page need not see each of hundreds.
PING_BATCH_S = 0.1


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="python -m lab.race", description=__doc__.split("\n\n")[0])
    parser.add_argument("--url", required=True, help="base URL of the lab server to race")
    parser.add_argument("--mode", required=True, help="the mode to race")
    parser.add_argument("--workload", default="count", help="workload name (a mode that runs its own ignores it)")
    parser.add_argument("--warmup", type=float, default=0.0, metavar="S", help="load the route S seconds first")
    parser.add_argument("-p", dest="params", action="append", type=param_pair, default=[], metavar="NAME=VALUE")
    parser.add_argument("-c", dest="concurrency", type=int, default=10, help="simultaneous requests")
    return parser


def _print(event: Event) -> None:
    sys.stdout.write(json.dumps(event) + "\n")
    sys.stdout.flush()


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    spec = RaceSpec(
        args.url,
        args.mode,
        args.workload,
        dict(args.params),
        args.concurrency,
        warmup_s=args.warmup,
        ping_batch=PING_BATCH_S,
    )
    try:
        race(spec, _print)
    except (RuntimeError, OSError) as error:  # a server that went away, a refused or reset connection
        _print({"event": "error", "message": str(error)})
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
