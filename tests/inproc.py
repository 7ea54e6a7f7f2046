"""The lab's app in this very process, for tests where no process behaviour is involved.

Tornado's AsyncHTTPTestCase idea (make_app served on an unused port, no
subprocess), as a pytest fixture so that parametrize and hypothesis work:
the app and the embedded upstream's app run on one IOLoop in a background
thread, behind the same LabHTTPServer as the real server, so routes, params,
404/405/414 and every error shape are exactly the server's. Every runner is
real; the process pool is started only when asked for (`pools=True`: its
workers take seconds to spawn), otherwise a /processing run gets 503. Fork,
signals and pool faults are the subprocess tests' job.
"""

from __future__ import annotations

import asyncio
import dataclasses
import logging
import threading
from collections.abc import Iterator

from tornado.httpserver import HTTPServer
from tornado.netutil import bind_sockets

from handlers.app import make_app
from lab.config import Config
from lab.instruments.stats import Board, RequestStats
from lab.modes.processing.runner import ProcessRunner
from lab.modes.registry import build_runners
from lab.modes.upstream.server import make_upstream_app
from lab.serve.services import Services
from lab.web.httpserver import make_http_server


class InProcessLab:
    """make_app on 127.0.0.1:<free port> in a thread of its own; `url` like a LabServer's."""

    def __init__(self, config: Config | None = None, *, pools: bool = False) -> None:
        self.config = config or Config(thread_pool=2, process_pool=1, access_log=False)
        self.pools = pools
        self.url = ""
        self.errors: list[logging.LogRecord] = []
        self._ready = threading.Event()
        self._thread = threading.Thread(target=asyncio.run, args=(self._serve(),), name="in-process-lab", daemon=True)
        self._loop: asyncio.AbstractEventLoop | None = None
        self._stop: asyncio.Event | None = None

    def start(self) -> InProcessLab:
        self._thread.start()
        if not self._ready.wait(30):
            raise RuntimeError("the in-process lab did not start")
        return self

    async def _serve(self) -> None:
        self._loop = asyncio.get_running_loop()
        self._stop = asyncio.Event()
        upstream = HTTPServer(make_upstream_app())
        [upstream_socket] = bind_sockets(0, "127.0.0.1")
        upstream.add_sockets([upstream_socket])
        [socket] = bind_sockets(0, "127.0.0.1")
        self.url = f"http://127.0.0.1:{socket.getsockname()[1]}"
        config = self.config
        if config.upstream is None:  # as lab/serve/main.py does with its embedded upstream
            config = dataclasses.replace(config, upstream=f"http://127.0.0.1:{upstream_socket.getsockname()[1]}")
        runners = build_runners(config)
        for runner in runners.values():
            if self.pools or not isinstance(runner, ProcessRunner):
                await runner.start()
        services = Services(
            config=config, base_url=self.url, runners=runners, task_id=None, board=Board(1), requests=RequestStats()
        )
        server = make_http_server(make_app(config, services))
        server.add_sockets([socket])
        self._ready.set()
        await self._stop.wait()
        server.stop()
        upstream.stop()
        await server.close_all_connections()
        await upstream.close_all_connections()
        await services.close()

    def stop(self) -> None:
        if self._loop is not None and self._stop is not None:
            self._loop.call_soon_threadsafe(self._stop.set)
        self._thread.join(30)


class _Collect(logging.Handler):
    def __init__(self, records: list[logging.LogRecord]) -> None:
        super().__init__(logging.ERROR)
        self.records = records

    def emit(self, record: logging.LogRecord) -> None:
        self.records.append(record)


def serve_in_process(config: Config | None = None, *, pools: bool = False) -> Iterator[InProcessLab]:
    """Body of a fixture: the lab in-process; every ERROR it logs (a traceback, say) is kept in `errors`."""
    lab = InProcessLab(config, pools=pools)
    handler = _Collect(lab.errors)
    logging.getLogger().addHandler(handler)
    try:
        yield lab.start()
    finally:
        lab.stop()
        logging.getLogger().removeHandler(handler)
