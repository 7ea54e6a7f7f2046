"""The server's run, in order: parse, bind, fork, serve, stop cleanly (server.py calls main()).

The order in main() is the fork-safety contract (Tornado's
docs/guide/running.rst): sockets are bound in the parent, children are forked
before anything creates an IOLoop, an HTTP client or an executor, and each
child then builds its own with asyncio.run. The web application comes in as
`make_app` (handlers/app.py), so that requests' code sits above this module,
never below it.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import logging
import os
import resource
import signal
import socket
import sys
from collections.abc import Callable, Sequence
from types import FrameType

import psutil
from tornado import autoreload
from tornado.netutil import bind_sockets
from tornado.process import fork_processes
from tornado.web import Application

from lab import collector, logs
from lab.config import Config, parse_args
from lab.instruments.stats import Board
from lab.modes.registry import preflight
from lab.modes.upstream.embedded import EmbeddedUpstream
from lab.procs import LISTEN_BACKLOG, kill_children, watch_parent
from lab.serve.accept import reserve_port
from lab.serve.dispatch import Dispatcher
from lab.serve.services import Services
from lab.web.httpserver import LabHTTPServer, make_http_server

log = logging.getLogger("lab.server")


def raise_fd_limit(wanted: int = 65536) -> None:
    """Raise the soft open-files limit towards `wanted` (never lower it, never past the hard limit).

    Each concurrent /async request holds two sockets (client and upstream).
    """
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    target = wanted if hard == resource.RLIM_INFINITY else min(hard, wanted)
    if soft != resource.RLIM_INFINITY and soft < target:
        resource.setrlimit(resource.RLIMIT_NOFILE, (target, hard))


STOP_SIGNALS = (signal.SIGTERM, signal.SIGINT)

# Stop signals that arrived before serve() could handle them (see defer_stop_signals).
early_signals: list[int] = []


def defer_stop_signals() -> None:
    """Until serve() installs its own handlers, note SIGTERM/SIGINT instead of dying of them.

    Start-up has a window (binding, starting the upstream, forking) where the
    default action would end the process on the spot: a parent killed there
    leaves its embedded upstream running, a child dies with -15 instead of
    stopping cleanly. serve() replays what was noted as soon as it can.
    """

    def note(signum: int, frame: FrameType | None) -> None:
        early_signals.append(signum)

    for sig in STOP_SIGNALS:
        signal.signal(sig, note)


def fork_children(
    count: int, spare: set[int], dispatch_from: list[socket.socket] | None = None
) -> tuple[int, socket.socket | None]:
    """Fork `count` servers; returns in each child: its task id, and its channel from a dispatching parent.

    With `dispatch_from` (--accept dispatch), the parent keeps those sockets
    and hands out their connections (lab/serve/dispatch.py). Otherwise it stays
    inside tornado.process.fork_processes, restarting children that crash,
    and forwards SIGTERM/SIGINT to the children (Tornado does not). Either
    way it exits once all of them have stopped cleanly. `spare` are child
    pids that are not servers (the embedded upstream): the caller stops
    those last.
    """
    channel = None
    if dispatch_from is not None:
        if early_signals:  # a stop came before the fork: nothing to start
            log.info("stopped during start-up")
            sys.exit(0)
        task_id, channel = Dispatcher(dispatch_from, count, in_child=defer_stop_signals).run()
    else:
        task_id = _fork_processes(count, spare)
    # From here on we are a child: a stop before serve() is noted, not fatal.
    defer_stop_signals()
    watch_parent()
    return task_id, channel


def _fork_processes(count: int, spare: set[int]) -> int:
    """tornado.process.fork_processes, with stop signals forwarded to the children; returns in a child."""
    stopping = False

    def forward(signum: int, frame: FrameType | None) -> None:
        nonlocal stopping
        stopping = True
        for child in psutil.Process().children():
            if child.pid not in spare:
                child.send_signal(signal.SIGTERM)

    if early_signals:
        stopping = True  # a stop came before the fork: the children replay it and end at once
    for sig in STOP_SIGNALS:
        signal.signal(sig, forward)
    task_id = fork_processes(count)
    if stopping:  # forked (or restarted) while the parent shuts down: nothing to do
        log.info("stopped during start-up")
        sys.exit(0)
    return task_id


# The web application for one server process: handlers/app.py's make_app.
AppFactory = Callable[[Config, Services], Application]


async def serve(
    config: Config,
    sockets: list[socket.socket],
    make_app: AppFactory,
    *,
    board: Board,
    base_url: str,
    task_id: int | None,
    channel: socket.socket | None = None,
) -> bool:
    """One server process: runners, app, HTTP server (its connections from `sockets`, or handed down
    `channel` by a dispatching parent). True if every request finished."""
    stop, hurry = _stop_events()
    # Warming the process pool takes seconds; a stop signal must not wait for it.
    starting = asyncio.ensure_future(Services.start(config, base_url, task_id, board))
    await asyncio.wait([starting, asyncio.ensure_future(stop.wait())], return_when=asyncio.FIRST_COMPLETED)
    if not starting.done():
        starting.cancel()  # Services.start closes what it had started
        with contextlib.suppress(asyncio.CancelledError):
            await starting
        log.info("stopped during start-up")
        return True
    services = starting.result()
    collector.settle()  # numpy, scikit-learn and the app live as long as the process
    if config.debug:
        autoreload.add_reload_hook(kill_children)  # pools, clusters, the upstream: exec() would orphan them
    # Fair accept and dispatch both decide from what each process holds; the others need not know.
    policy = config.accept if config.forked else "all"
    lifecycle = services.lifecycle if policy in ("fair", "dispatch") else None
    server = make_http_server(make_app(config, services), lifecycle, fair=policy == "fair")
    if channel is not None:
        server.take_from(channel)
    server.add_sockets(sockets)
    await stop.wait()
    return await _stop(server, services, hurry)


def _stop_events() -> tuple[asyncio.Event, asyncio.Event]:
    """`stop` is set by SIGTERM/SIGINT (also one noted during start-up); `hurry` by a second Ctrl-C."""
    stop = asyncio.Event()
    hurry = asyncio.Event()
    interrupts = 0

    def on_signal(signum: int) -> None:
        # Ctrl-C reaches every process in the terminal's group and a forked
        # parent forwards a SIGTERM too, so one keypress can arrive twice:
        # only a second SIGINT means "stop waiting for in-flight work".
        nonlocal interrupts
        interrupts += signum == signal.SIGINT
        if interrupts > 1:
            hurry.set()
        stop.set()

    loop = asyncio.get_running_loop()
    for sig in STOP_SIGNALS:
        loop.add_signal_handler(sig, on_signal, sig)
    for signum in early_signals:  # a stop that came during start-up
        on_signal(signum)
    early_signals.clear()
    return stop, hurry


async def _stop(server: LabHTTPServer, services: Services, hurry: asyncio.Event) -> bool:
    """No new connections; in-flight requests get the grace period (or until `hurry`), then all closes."""
    grace, lifecycle = services.config.grace, services.lifecycle
    log.info("stopping: %d requests in flight, up to %g s to finish", lifecycle.active, grace)
    server.stop()  # in-flight requests go on
    drained = asyncio.ensure_future(services.drain(grace))
    await asyncio.wait([drained, asyncio.ensure_future(hurry.wait())], return_when=asyncio.FIRST_COMPLETED)
    finished = drained.done() and drained.result()
    if not finished:
        drained.cancel()
        log.warning("grace period over: %d requests get 503, running pool jobs are stopped", lifecycle.active)
        lifecycle.abandon()
        with contextlib.suppress(TimeoutError):  # time for those 503s to be written
            await asyncio.wait_for(lifecycle.done(), 1.0)
    await server.close_all_connections()
    await services.close(wait=finished)
    log.info("stopped")
    return finished


def _base_url(host: str, port: int) -> str:
    """How this server reaches itself: a wildcard bind is reached on loopback."""
    host = {"0.0.0.0": "127.0.0.1", "::": "::1", "": "127.0.0.1"}.get(host, host)
    return f"http://[{host}]:{port}" if ":" in host else f"http://{host}:{port}"


def main(make_app: AppFactory, argv: Sequence[str] | None = None) -> None:
    """Parse, configure logging, bind, start the upstream, fork, then serve in every process until stopped."""
    config = parse_args(argv)
    logs.configure()
    problem = preflight(config)
    if problem:
        print(f"server.py: error: {problem}", file=sys.stderr)
        sys.exit(2)
    raise_fd_limit()
    defer_stop_signals()  # from here on, a stop is a clean one
    reuse_port = config.forked and config.accept == "reuseport"
    if reuse_port:
        # Each child binds a socket of its own after the fork; this one only
        # keeps the port (it never listens, so no connection lands on it).
        reservation = reserve_port(config.host, config.port)
        sockets, port = [], reservation.getsockname()[1]
    else:
        sockets = bind_sockets(config.port, config.host, backlog=LISTEN_BACKLOG)
        port = sockets[0].getsockname()[1]
    board = Board(config.process_count)  # shared memory: must exist before the fork
    upstream = None if config.upstream else EmbeddedUpstream.start()
    if upstream is not None:  # from here on, /async's upstream is this one, as if given with --upstream
        config = dataclasses.replace(config, upstream=upstream.url)
    parent = os.getpid()
    base_url = _base_url(config.host, port)
    policy = f", accept policy {config.accept}" if config.forked else ""
    log.info("serving on %s/ with %d process(es)%s; Ctrl-C stops", base_url, config.process_count, policy)
    try:
        task_id, channel = None, None
        if config.forked:
            dispatch_from = sockets if config.accept == "dispatch" else None
            spare = {upstream.process.pid} if upstream else set()
            task_id, channel = fork_children(config.process_count, spare, dispatch_from)
        if reuse_port:
            sockets = bind_sockets(port, config.host, backlog=LISTEN_BACKLOG, reuse_port=True)
        if channel is not None:
            sockets = []  # (closed in the child by the fork: the parent accepts on them)
        finished = asyncio.run(
            serve(config, sockets, make_app, board=board, base_url=base_url, task_id=task_id, channel=channel)
        )
    finally:
        if os.getpid() == parent and upstream is not None:
            upstream.stop()
    if not finished:
        # A pool thread is still running an abandoned job and the interpreter
        # would join it at exit; the grace period is over, so go now.
        logging.shutdown()
        os._exit(0)
