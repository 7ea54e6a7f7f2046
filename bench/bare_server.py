"""The floor: a bare Tornado server doing each of the lab's hops with nothing else (bench/lib/floor.py's routes).

    python -m bench.bare_server --port 0       # GET /sleep?seconds=S answers {"slept": S} after S seconds
    python -m bench.bare_server --port 0 --settled-collector    # its collector set as the lab's
    python -m bench.bare_server --port 0 --thread-pool 6 --process-pool 2 --upstream http://127.0.0.1:PORT
    python -m bench.bare_server --port 0 --processes 2 --accept dispatch    # forked (bench/lib/floor_fork.py)

bench.crowd and bench.overhead start it beside a lab server: whatever the
lab costs above it on the same request (its envelope, its clocks, its
lifecycle and stats) is the lab's own work. Same listen backlog as the lab,
no access log, one process unless forked (bench.overhead's accept part
forks it, as it forks the lab), and none of the lab's machinery: /ping and
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
import socket
from collections.abc import Callable, Sequence

from tornado.httpserver import HTTPServer
from tornado.ioloop import IOLoop
from tornado.iostream import IOStream
from tornado.netutil import bind_sockets

from bench.lib.floor import FloorPools, make_floor_app
from bench.lib.floor_fork import serve_forked
from lab import collector
from lab.procs import LISTEN_BACKLOG
from lab.web.channel import peer, receiver


async def serve(
    sockets: Sequence[socket.socket],
    pools: FloorPools,
    channel: socket.socket | None = None,
    ready: Callable[[], None] | None = None,
) -> None:
    """Serve from `sockets` and from connections arriving down `channel` (a dispatched child's) until a stop
    signal (or the channel's end: its parent has gone); `ready` once the pools are warm (else the start-up
    line). Its pools are closed however it ends."""
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    try:
        await pools.start()
        server = HTTPServer(make_floor_app(pools))
        server.add_sockets(sockets)
        if channel is not None:
            take_from(channel, server, stop.set)
        if ready is None:
            # The same words as the lab's start-up line, so bench.lib.servers.wait_ready reads both alike;
            # written once the pools are warm, so that a bench may time the first request.
            print(f"serving on {url_of(sockets[0])}/", flush=True)
        else:
            ready()
        await stop.wait()
        server.stop()
        await server.close_all_connections()
    finally:
        await pools.close()


def take_from(channel: socket.socket, server: HTTPServer, parent_gone: Callable[[], None]) -> None:
    """Serve each connection the dispatching parent sends down `channel` (bench/lib/floor_fork.py), as
    accepting would; `parent_gone` when the channel ends."""
    channel.setblocking(False)
    loop = IOLoop.current()

    def took(connections: list[socket.socket]) -> None:
        for connection in connections:
            if (address := peer(connection)) is not None:
                server.handle_stream(IOStream(connection), address)

    def gone() -> None:
        loop.remove_handler(channel.fileno())
        parent_gone()

    loop.add_handler(channel.fileno(), receiver(channel, took, gone), IOLoop.READ)


def url_of(sock: socket.socket) -> str:
    host, port = sock.getsockname()[:2]
    return f"http://{host}:{port}"


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
    parser.add_argument("--processes", type=int, default=1, metavar="N",
                        help="forked processes, each with pools of the sizes given (default: %(default)s)")  # fmt: skip
    parser.add_argument("--accept", choices=("all", "dispatch"), default="all",
                        help="forked: every child accepts (Tornado's own), or the parent accepts and hands each "
                             "connection to the next child in turn (default: %(default)s)")  # fmt: skip
    return parser


def main(argv: Sequence[str] | None = None) -> None:
    parser = build_parser()
    args = parser.parse_args(argv)
    if min(args.thread_pool, args.process_pool + 1, args.interpreter_pool + 1) < 1 or not 1 <= args.processes <= 64:
        parser.error("--thread-pool takes 1 or more, --process-pool and --interpreter-pool 0 or more, "
                     "--processes 1 to 64")  # fmt: skip
    if args.settled_collector:
        collector.settle()
    pools = FloorPools(args.thread_pool, args.process_pool, args.interpreter_pool, args.upstream, args.dask_scheduler)
    sockets = bind_sockets(args.port, args.host, backlog=LISTEN_BACKLOG)
    if args.processes == 1:
        asyncio.run(serve(sockets, pools))
        return

    def child(listeners: Sequence[socket.socket], channel: socket.socket | None, ready: Callable[[], None]) -> None:
        asyncio.run(serve(listeners, pools, channel, ready))  # (its pools made in the child, after the fork)

    serve_forked(sockets, args.processes, args.accept, child, url_of(sockets[0]))


if __name__ == "__main__":
    main()
