"""The embedded upstream service: GET /delay?seconds=X answers after asyncio.sleep(X).

Started by the server (embedded.py, EmbeddedUpstream) as `python -m
lab.modes.upstream.server --fd N --parent PID` on a socket it inherits; `python -m
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

from tornado.web import Application

from lab import collector, logs
from lab.errors import LabError
from lab.procs import watch_parent
from lab.web.httpserver import make_http_server
from lab.web.json_handler import JsonHandler
from lab.web.query import decode_query
from workloads.params import FloatParam, ParamError, parse_params

MAX_DELAY = 60.0
# A connection idle this long is closed, so that its descriptors return to rest after a crowd whatever
# the client does. The server starts it with a longer one than its own --upstream-idle
# (lab/modes/upstream/client.py's UPSTREAM_IDLE_MARGIN_S): the pooled client closes first, and never sends a
# call on a connection being closed.
IDLE_CONNECTION_TIMEOUT_S = 30.0
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


class NotFoundHandler(JsonHandler):
    """Every other path: a JSON 404, like every answer of this service."""

    def prepare(self) -> None:
        decode_query(self.request)  # a 414 or 400 before the 404, as the lab answers
        raise LabError(404, f"no route for {self.request.path[:200]!r}; this upstream serves /delay?seconds=X")


routes = [(r"/delay", DelayHandler)]


def make_upstream_app() -> Application:
    return Application(routes, default_handler_class=NotFoundHandler)


async def serve(sock: socket.socket, idle_timeout: float = IDLE_CONNECTION_TIMEOUT_S) -> None:
    server = make_http_server(make_upstream_app(), idle_connection_timeout=idle_timeout)
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
    parser.add_argument(
        "--parent",
        type=int,
        metavar="PID",
        help="with --fd, required: the server that started it, which it goes with",
    )
    parser.add_argument(
        "--idle-timeout",
        type=float,
        default=IDLE_CONNECTION_TIMEOUT_S,
        metavar="S",
        help="close a connection that has carried no request for S seconds (default: %(default)s)",
    )
    args = parser.parse_args(argv)
    if args.fd is not None and args.parent is None:
        parser.error("--fd needs --parent: the server it goes with")
    # Its access log would double every /async line; warnings and errors only.
    logs.configure(logging.WARNING)
    if args.fd is not None:
        # Started by server.py: Ctrl-C is the server's to handle (it stops us
        # after its in-flight /async requests), and we go if it goes.
        signal.signal(signal.SIGINT, signal.SIG_IGN)
        watch_parent(args.parent)
        sock = socket.socket(fileno=args.fd)
    else:
        sock = socket.create_server(("127.0.0.1", args.port))
        print(f"upstream on http://127.0.0.1:{sock.getsockname()[1]}", flush=True)
    sock.setblocking(False)
    collector.settle()  # it holds a call per /async wait: a crowd of them, like the server
    asyncio.run(serve(sock, args.idle_timeout))


if __name__ == "__main__":
    main()
