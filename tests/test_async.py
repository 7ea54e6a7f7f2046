"""/async: concurrent upstream calls awaited on the IOLoop; upstream failures map to 502/504."""

from __future__ import annotations

import socket
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from tests.conftest import StartServer
from tests.envelopes import assert_envelope, assert_error, max_concurrency
from tests.lab_server import LabServer, copies, get, get_many
from tests.twins import twin


def test_fanout_calls_overlap_at_the_upstream(server: LabServer) -> None:
    body = get(f"{server.url}/async?delay=1&fanout=5").json()
    assert_envelope(body, "async", "upstream")
    assert body["params"] == {"delay": 1.0, "fanout": 5}
    calls = body["result"]["calls"]
    assert len(calls) == 5
    assert len({c["pid"] for c in calls}) == 1
    assert calls[0]["pid"] not in (server.pid, body["server"]["pid"])  # the upstream is its own process
    assert max_concurrency([(c["started"], c["finished"]) for c in calls]) == 5
    assert body["worker"] == {"pid": server.pid, "thread": "MainThread"}


def test_many_concurrent_requests_are_not_queued_in_the_client(server: LabServer) -> None:
    # 30 requests x fanout 2 = 60 calls, far past AsyncHTTPClient's default of 10. The
    # delay is long enough for all of them to arrive on a busy machine: if the
    # client queued any, some would start only after the first ones finished.
    replies = get_many(copies(f"{server.url}/async?delay=4&fanout=2", 30))
    calls = [c for r in replies for c in r.json()["result"]["calls"]]
    assert max_concurrency([(c["started"], c["finished"]) for c in calls]) == 60


def test_delay_and_fanout_are_validated(server: LabServer) -> None:
    assert_error(get(f"{server.url}/async?delay=-1"), 400, "delay must be a number between 0 and 30")
    assert_error(get(f"{server.url}/async?fanout=0"), 400, "fanout must be an integer between 1 and 50")
    assert_error(get(f"{server.url}/async?delay=inf"), 400, "delay")


@pytest.fixture
def silent_upstream() -> Iterator[str]:
    # Listens (the kernel completes the handshake) but never answers.
    with socket.create_server(("127.0.0.1", 0)) as sock:
        yield f"http://127.0.0.1:{sock.getsockname()[1]}"


def test_refused_upstream_is_502(start_server: StartServer, refused_port: int) -> None:
    lab = start_server("--upstream", f"http://127.0.0.1:{refused_port}", "--process-pool", "1")
    assert_error(get(f"{lab.url}/async?delay=0"), 502, "unreachable")
    assert get(f"{lab.url}/ping").status == 200


def test_silent_upstream_is_504(start_server: StartServer, silent_upstream: str) -> None:
    lab = start_server("--upstream", silent_upstream, "--upstream-timeout", "1", "--process-pool", "1")
    with twin(15) as twin_sleeps:  # (tests/twins.py) the default --upstream-timeout's 15 s
        reply = get(f"{lab.url}/async?delay=0")
        assert twin_sleeps()  # answered before the default timeout could have fallen
    assert_error(reply, 504, "did not answer within 1 s")
    assert get(f"{lab.url}/ping").status == 200


def test_a_delay_longer_than_the_upstream_timeout_is_not_a_fault(start_server: StartServer) -> None:
    lab = start_server("--upstream-timeout", "1", "--process-pool", "1")
    body = get(f"{lab.url}/async?delay=1.5").json()
    assert body["result"]["calls"][0]["seconds"] == 1.5


@pytest.fixture
def garbage_upstream() -> Iterator[str]:
    # Answers 200 with a body that is not JSON.
    class Garbage(BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            self.send_response(200)
            self.end_headers()
            self.wfile.write(b"<html>not json</html>")

        def log_message(self, *args: object) -> None:
            pass

    with ThreadingHTTPServer(("127.0.0.1", 0), Garbage) as httpd:
        thread = threading.Thread(target=httpd.serve_forever, daemon=True)
        thread.start()
        yield f"http://127.0.0.1:{httpd.server_address[1]}"
        httpd.shutdown()


def test_an_upstream_answering_garbage_is_502(start_server: StartServer, garbage_upstream: str) -> None:
    lab = start_server("--upstream", garbage_upstream, "--process-pool", "1")
    assert_error(get(f"{lab.url}/async?delay=0"), 502, "not a JSON object")
