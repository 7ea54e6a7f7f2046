"""The server's run, in order: parse, bind, fork, serve, stop cleanly (server.py calls main()).

The order in main() is the fork-safety contract (Tornado's
docs/guide/running.rst): sockets are bound in the parent, children are forked
before anything creates an IOLoop, an HTTP client or an executor, and each
child then builds its own with asyncio.run. The forking, and the parent's
life after it, is lab/serve/supervisor.py's. The web application comes in as
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
import socket
import sys
from collections.abc import Callable, Sequence

from tornado import autoreload
from tornado.netutil import bind_sockets
from tornado.web import Application

from lab import collector, logs
from lab.config import Config, parse_args
from lab.database import EmbeddedDatabase
from lab.database import preflight as database_preflight
from lab.instruments.stats import Board
from lab.machine import read_cores
from lab.modes.registry import preflight
from lab.modes.upstream.client import UPSTREAM_IDLE_MARGIN_S
from lab.modes.upstream.embedded import EmbeddedUpstream
from lab.modes.upstream.settings import UPSTREAM_IDLE
from lab.procs import LISTEN_BACKLOG, kill_children
from lab.serve.services import Services
from lab.serve.signals import Asked, StopSignals
from lab.serve.supervisor import Doorway, Forked, Supervisor
from lab.web.httpserver import LabHTTPServer, make_http_server
from workloads import ml

log = logging.getLogger("lab.server")


def raise_fd_limit(wanted: int = 65536) -> None:
    """Raise the soft open-files limit towards `wanted` (never lower it, never past the hard limit).

    Each concurrent /async request holds two sockets (client and upstream).
    """
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    target = wanted if hard == resource.RLIM_INFINITY else min(hard, wanted)
    if soft != resource.RLIM_INFINITY and soft < target:
        resource.setrlimit(resource.RLIMIT_NOFILE, (target, hard))


# The web application for one server process: handlers/app.py's make_app.
AppFactory = Callable[[Config, Services], Application]


async def serve(
    config: Config,
    sockets: list[socket.socket],
    make_app: AppFactory,
    *,
    board: Board,
    base_url: str,
    signals: StopSignals,
    forked: Forked | None = None,
) -> bool:
    """One server process, `forked` or not: runners, app, HTTP server (its connections from `sockets`, or
    handed down its channel by a dispatching parent), until `signals` ask it to stop. True if all finished."""
    task_id = forked.task_id if forked is not None else None
    signals.listen()  # (a stop noted during start-up still stands)
    stop = asyncio.ensure_future(signals.until(Asked.STOP))
    # Warming the process pool takes seconds; a stop signal must not wait for it.
    starting = asyncio.ensure_future(Services.start(config, base_url, task_id, board))
    await asyncio.wait([starting, stop], return_when=asyncio.FIRST_COMPLETED)
    if not starting.done():
        starting.cancel()  # Services.start closes what it had started
        with contextlib.suppress(asyncio.CancelledError):
            await starting
        log.info("stopped during start-up")
        return True
    services = starting.result()
    collector.settle()  # numpy, scikit-learn (unless lazy) and the app live as long as the process
    if config.debug:
        autoreload.add_reload_hook(kill_children)  # pools, clusters, the upstream: exec() would orphan them
        autoreload.add_reload_hook(logs.write_held)  # exec() runs no logging.shutdown
    # Fair accept and dispatch both decide from what each process holds; the others need not know.
    policy = config.accept if config.forked else "all"
    lifecycle = services.lifecycle if policy in ("fair", "dispatch") else None
    server = make_http_server(make_app(config, services), lifecycle, fair=policy == "fair")
    if forked is not None and forked.channel is not None:
        server.take_from(forked.channel)
    server.add_sockets(sockets)
    await stop
    return await _stop(server, services, signals)


async def _stop(server: LabHTTPServer, services: Services, signals: StopSignals) -> bool:
    """No new connections; in-flight requests get the grace period (or until a second Ctrl-C), then all closes."""
    grace, lifecycle = services.config.grace, services.lifecycle
    log.info("stopping: %d requests in flight, up to %g s to finish", lifecycle.active, grace)
    server.stop()  # in-flight requests go on
    drained = asyncio.ensure_future(services.drain(grace))
    hurry = asyncio.ensure_future(signals.until(Asked.HURRY))
    await asyncio.wait([drained, hurry], return_when=asyncio.FIRST_COMPLETED)
    hurry.cancel()
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


def _say_cores() -> None:
    """Warn when the cores this server may use differ from the host's: its default pool sizes follow the former."""
    for note in read_cores().differences():
        log.warning("cores: %s", note)


def _prepare_workers(config: Config) -> None:
    """Before any worker starts and before the fork: a lazy lab says so in this process's environment, which
    every worker inherits (workloads/ml.py); a forked one that is not imports scikit-learn here, once for all its
    children (each still trains its own predict model: a fit's threads must not meet a fork). A single server
    imports it in its warm-up, as its pool workers do."""
    if config.lazy_ml:
        os.environ[ml.LAZY_ENV] = "1"
    if config.forked and not ml.lazy():
        ml.preload()


def _reserve_port(host: str, port: int) -> socket.socket:
    """--accept reuseport's port, kept in the parent (lab/serve/accept/reuseport.py, imported for it alone)."""
    from lab.serve.accept.reuseport import reserve_port  # noqa: PLC0415

    return reserve_port(host, port)


def _dispatch(sockets: list[socket.socket], count: int) -> Doorway:
    """--accept dispatch's doorway: the parent accepts (lab/serve/accept/dispatch.py, imported for it alone)."""
    from lab.serve.accept.dispatch import Dispatch  # noqa: PLC0415

    return Dispatch(sockets, count)


def main(make_app: AppFactory, argv: Sequence[str] | None = None) -> None:
    """Parse, configure logging, bind, start the upstream, fork, then serve in every process until stopped."""
    config = parse_args(argv)
    logs.configure()
    _say_cores()
    problem = preflight(config) or (database_preflight(config.database) if config.database else None)
    if problem:
        print(f"server.py: error: {problem}", file=sys.stderr)
        sys.exit(2)
    _prepare_workers(config)
    raise_fd_limit()
    signals = StopSignals()
    signals.defer()  # from here on, a stop is a clean one
    reuse_port = config.forked and config.accept == "reuseport"
    if reuse_port:
        # Each child binds a socket of its own after the fork; this one only
        # keeps the port (it never listens, so no connection lands on it).
        reservation = _reserve_port(config.host, config.port)
        sockets, port = [], reservation.getsockname()[1]
    else:
        sockets = bind_sockets(config.port, config.host, backlog=LISTEN_BACKLOG)
        port = sockets[0].getsockname()[1]
    board = Board(config.process_count)  # shared memory: must exist before the fork
    # The embedded upstream keeps an idle connection longer than /async's client does: the client closes first.
    upstream_idle = config[UPSTREAM_IDLE] + UPSTREAM_IDLE_MARGIN_S
    upstream = None if config.upstream else EmbeddedUpstream.start(idle_timeout=upstream_idle)
    if upstream is not None:  # from here on, /async's upstream is this one, as if given with --upstream
        config = dataclasses.replace(config, upstream=upstream.url)
    embedded = None if config.database else EmbeddedDatabase.start()
    if embedded is not None:  # and `page` queries this file, as if given with --database
        config = dataclasses.replace(config, database=embedded.url)
    parent = os.getpid()
    base_url = _base_url(config.host, port)
    policy = f", accept policy {config.accept}" if config.forked else ""
    log.info("serving on %s/ with %d process(es)%s; Ctrl-C stops", base_url, config.process_count, policy)
    try:
        forked = None
        if config.forked:
            # However connections reach them, one supervisor forks, replaces and stops the children.
            doorway = _dispatch(sockets, config.process_count) if config.accept == "dispatch" else Doorway()
            forked = Supervisor(config.process_count, signals, doorway).run()
        if reuse_port:
            sockets = bind_sockets(port, config.host, backlog=LISTEN_BACKLOG, reuse_port=True)
        if forked is not None and forked.channel is not None:
            sockets = []  # (closed in the child by the fork: the parent accepts on them)
        finished = asyncio.run(
            serve(config, sockets, make_app, board=board, base_url=base_url, signals=signals, forked=forked)
        )
    finally:
        if os.getpid() == parent and upstream is not None:
            upstream.stop()
        if os.getpid() == parent and embedded is not None:
            embedded.stop()
    if not finished:
        # A pool thread is still running an abandoned job and the interpreter
        # would join it at exit; the grace period is over, so go now.
        logging.shutdown()
        os._exit(0)
