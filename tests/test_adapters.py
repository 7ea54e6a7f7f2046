"""The adapters to private parts: every name they reach still exists where they reach it.

A newer Tornado or Python that moves one fails here, naming it, instead of in
a forked server under load. Then read the adapter against the new release.
"""

from __future__ import annotations

import inspect
import multiprocessing
import os
import signal
from concurrent.futures import ProcessPoolExecutor
from concurrent.futures.process import BrokenProcessPool

import pytest
import tornado.http1connection
from tornado.tcpserver import TCPServer
from tornado.web import RequestHandler
from tornado.websocket import WebSocketHandler

from lab.modes.processing import executor
from lab.web import tornado_private


def test_the_tcpserver_parts_the_lab_reaches_exist() -> None:
    server = TCPServer()
    missing = [name for name in tornado_private.TCPSERVER if not hasattr(server, name)]
    assert not missing, f"Tornado moved TCPServer's {missing}: lab/web/tornado_private.py needs reading again"
    assert isinstance(server._sockets, dict) and isinstance(server._handlers, dict)
    assert list(inspect.signature(server._handle_connection).parameters) == ["connection", "address"]
    assert tornado_private.sockets(server) == [] and not tornado_private.stopped(server)
    server.stop()
    assert tornado_private.stopped(server)


def test_the_bare_400_is_what_tornado_writes() -> None:
    written = repr(tornado_private.BARE_400)[2:-1]  # as the source spells it, escapes and all
    assert written in inspect.getsource(tornado.http1connection)


def test_the_handler_parts_the_lab_reaches_exist() -> None:
    check = inspect.signature(WebSocketHandler._check_cross_origin)
    assert list(check.parameters) == ["self", "check"]
    assert "self._reason" in inspect.getsource(RequestHandler.set_status)
    assert "self._headers[name] = self._convert_header_value(value)" in inspect.getsource(RequestHandler.set_header)


def test_headers_set_as_checked_are_what_set_header_would_set() -> None:
    from lab.web.json_handler import DEFAULT_HEADERS

    for value in DEFAULT_HEADERS.values():
        assert RequestHandler._convert_header_value(None, value) == value  # type: ignore[arg-type]


@pytest.mark.slow
def test_the_process_pool_parts_the_lab_reaches_exist() -> None:
    assert all(hasattr(ProcessPoolExecutor(1), name) for name in executor.PRIVATE)
    with ProcessPoolExecutor(1, mp_context=multiprocessing.get_context("spawn")) as pool:
        pid = pool.submit(os.getpid).result(timeout=60)
        assert [process.pid for process in executor.workers(pool)] == [pid]
        assert not executor.broken(pool)
        os.kill(pid, signal.SIGKILL)
        with pytest.raises(BrokenProcessPool):
            pool.submit(os.getpid).result(timeout=60)
        assert executor.broken(pool)
