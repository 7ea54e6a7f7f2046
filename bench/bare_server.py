"""The floor for /async: a bare Tornado server whose one handler only awaits asyncio.sleep.

    python -m bench.bare_server --port 0       # GET /sleep?seconds=S answers {"slept": S} after S seconds
    python -m bench.bare_server --port 0 --settled-collector    # its collector set as the lab's

bench.crowd starts it beside a lab server: whatever the lab's /async costs
above this (its envelope, its upstream call, its stats) is the lab's own
work per request. Same listen backlog as the lab, no access log, one
process, and none of the lab's libraries (no numpy, no model). Started by
bench.crowd, it inherits the open-files limit bench.crowd raised for the
crowd it fires.
"""

from __future__ import annotations

import argparse
import asyncio
import signal
from collections.abc import Sequence

from tornado.httpserver import HTTPServer
from tornado.netutil import bind_sockets
from tornado.web import Application, HTTPError, RequestHandler

from lab import collector
from lab.procs import LISTEN_BACKLOG

MAX_SECONDS = 60.0


class SleepHandler(RequestHandler):
    """GET /sleep?seconds=S: await asyncio.sleep(S), then answer; nothing else."""

    async def get(self) -> None:
        try:
            seconds = float(self.get_query_argument("seconds", "1"))
        except ValueError:
            raise HTTPError(400) from None
        if not 0 <= seconds <= MAX_SECONDS:
            raise HTTPError(400)
        await asyncio.sleep(seconds)
        self.write({"slept": seconds})


async def serve(host: str, port: int) -> None:
    sockets = bind_sockets(port, host, backlog=LISTEN_BACKLOG)
    server = HTTPServer(Application([(r"/sleep", SleepHandler)]))
    server.add_sockets(sockets)
    # The same words as the lab's start-up line, so bench.lib.servers.wait_ready reads both alike.
    print(f"serving on http://{host}:{sockets[0].getsockname()[1]}/", flush=True)
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    await stop.wait()
    server.stop()
    await server.close_all_connections()


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m bench.bare_server", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)  # fmt: skip
    parser.add_argument("--host", default="127.0.0.1", help="bind address (default: %(default)s)")
    parser.add_argument("--port", type=int, default=0, help="port; 0 picks a free one (default: %(default)s)")
    parser.add_argument("--settled-collector", action="store_true",
                        help="the garbage collector set as the lab server's (lab/collector.py)")  # fmt: skip
    args = parser.parse_args(argv)
    if args.settled_collector:
        collector.settle()
    asyncio.run(serve(args.host, args.port))


if __name__ == "__main__":
    main()
