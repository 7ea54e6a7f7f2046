"""The floor: a bare Tornado server doing each of the lab's hops with nothing else (bench/lib/floor.py's routes).

    python -m bench.bare_server --port 0       # GET /sleep?seconds=S answers {"slept": S} after S seconds
    python -m bench.bare_server --port 0 --settled-collector    # its collector set as the lab's
    python -m bench.bare_server --port 0 --thread-pool 6 --process-pool 2 --upstream http://127.0.0.1:PORT

bench.crowd and bench.overhead start it beside a lab server: whatever the
lab costs above it on the same request (its envelope, its clocks, its
lifecycle and stats) is the lab's own work. Same listen backlog as the lab,
no access log, one process, and none of the lab's machinery: /ping and
/blocking answer on the loop, /threading, /processing and /interpreters
hand count(n) to an executor of the size given, /distributed submits it to
the Dask scheduler given, /async makes the lab's own upstream call to the
upstream given. Started by bench.crowd, it inherits the open-files limit
bench.crowd raised for the crowd it fires.
"""

from __future__ import annotations

import argparse
import asyncio
import signal
from collections.abc import Sequence

from tornado.httpserver import HTTPServer
from tornado.netutil import bind_sockets

from bench.lib.floor import FloorPools, make_floor_app
from lab import collector
from lab.procs import LISTEN_BACKLOG


async def serve(host: str, port: int, pools: FloorPools) -> None:
    sockets = bind_sockets(port, host, backlog=LISTEN_BACKLOG)
    await pools.start()
    server = HTTPServer(make_floor_app(pools))
    server.add_sockets(sockets)
    # The same words as the lab's start-up line, so bench.lib.servers.wait_ready reads both alike;
    # written once the pools are warm, so that a bench may time the first request.
    print(f"serving on http://{host}:{sockets[0].getsockname()[1]}/", flush=True)
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    await stop.wait()
    server.stop()
    await server.close_all_connections()
    await pools.close()


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="python -m bench.bare_server", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)  # fmt: skip
    parser.add_argument("--host", default="127.0.0.1", help="bind address (default: %(default)s)")
    parser.add_argument("--port", type=int, default=0, help="port; 0 picks a free one (default: %(default)s)")
    parser.add_argument("--settled-collector", action="store_true",
                        help="the garbage collector set as the lab server's (lab/collector.py)")  # fmt: skip
    parser.add_argument("--thread-pool", type=int, default=6, metavar="N", help="threads (default: %(default)s)")
    parser.add_argument("--process-pool", type=int, default=0, metavar="N",
                        help="worker processes; 0: no /processing (default: %(default)s)")  # fmt: skip
    parser.add_argument("--interpreter-pool", type=int, default=0, metavar="N",
                        help="sub-interpreters (Python 3.12+); 0: no /interpreters (default: %(default)s)")  # fmt: skip
    parser.add_argument("--upstream", metavar="URL", help="base URL /async calls (default: no /async)")
    parser.add_argument("--dask-scheduler", metavar="tcp://HOST:PORT",
                        help="the Dask scheduler /distributed submits to (default: no /distributed)")  # fmt: skip
    return parser


def main(argv: Sequence[str] | None = None) -> None:
    parser = build_parser()
    args = parser.parse_args(argv)
    if min(args.thread_pool, args.process_pool + 1, args.interpreter_pool + 1) < 1:
        parser.error("--thread-pool takes 1 or more, --process-pool and --interpreter-pool 0 or more")
    if args.settled_collector:
        collector.settle()
    pools = FloorPools(args.thread_pool, args.process_pool, args.interpreter_pool, args.upstream, args.dask_scheduler)
    asyncio.run(serve(args.host, args.port, pools))


if __name__ == "__main__":
    main()
