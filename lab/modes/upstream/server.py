"""The embedded upstream service: GET /delay?seconds=X answers after asyncio.sleep(X).

Started by the server (embedded.py, EmbeddedUpstream) as `python -m
lab.modes.upstream.server --fd N` on a socket it inherits; `python -m
lab.modes.upstream.server --port 9000` runs it alone, e.g. as another server's
--upstream. It imports nothing that loads numpy: every server start pays for
its start-up.
"""

from __future__ import annotations

import argparse
import asyncio
import logging
import os
import signal
import socket
import time
from collections.abc import Sequence

from tornado.httpserver import HTTPServer
from tornado.web import Application

from lab import collector, logs
from lab.errors import LabError
from lab.procs import watch_parent
from lab.web.json_handler import JsonHandler
from lab.web.query import decode_query
from workloads.params import FloatParam, ParamError, parse_params

MAX_DELAY = 60.0
DELAY_PARAMS = (FloatParam("seconds", 1.0, 0.0, MAX_DELAY, "how long to wait before answering"),)


class DelayHandler(JsonHandler):
    async def get(self) -> None:
        try:
            seconds = parse_params("delay", DELAY_PARAMS, decode_query(self.request))["seconds"]
        except ParamError as error:
            raise LabError(400, error.message) from None
        started = time.time()
        await asyncio.sleep(seconds)
        self.write({"pid": os.getpid(), "seconds": seconds, "started": started, "finished": time.time()})


routes = [(r"/delay", DelayHandler)]


def make_upstream_app() -> Application:
    return Application(routes)


async def serve(sock: socket.socket) -> None:
    server = HTTPServer(make_upstream_app())
    server.add_sockets([sock])
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        if signal.getsignal(sig) is not signal.SIG_IGN:
            loop.add_signal_handler(sig, stop.set)
    await stop.wait()
    server.stop()
    await server.close_all_connections()


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m lab.modes.upstream.server", description=__doc__)
    where = parser.add_mutually_exclusive_group(required=True)
    where.add_argument("--fd", type=int, help="serve on this inherited listening socket")
    where.add_argument("--port", type=int, help="bind 127.0.0.1:PORT")
    args = parser.parse_args(argv)
    # Its access log would double every /async line; warnings and errors only.
    logs.configure(logging.WARNING)
    if args.fd is not None:
        # Started by server.py: Ctrl-C is the server's to handle (it stops us
        # after its in-flight /async requests), and we go if it goes.
        signal.signal(signal.SIGINT, signal.SIG_IGN)
        watch_parent()
        sock = socket.socket(fileno=args.fd)
    else:
        sock = socket.create_server(("127.0.0.1", args.port))
        print(f"upstream on http://127.0.0.1:{sock.getsockname()[1]}", flush=True)
    sock.setblocking(False)
    collector.settle()  # it holds a call per /async wait: a crowd of them, like the server
    asyncio.run(serve(sock))


if __name__ == "__main__":
    main()
