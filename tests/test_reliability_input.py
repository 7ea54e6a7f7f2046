"""Hostile input: whatever arrives, the answer is a quick 4xx JSON error and the server lives on."""

from __future__ import annotations

import urllib.parse
from collections.abc import Iterator
from typing import Any

import pytest
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st

from lab.config import Config
from lab.modes.upstream import ASYNC_PARAMS
from tests.inproc import InProcessLab, serve_in_process
from tests.rawhttp import RawReply, exchange, get_raw
from workloads.params import ParamError, parse_params
from workloads.registry import WORKLOADS

MODES = ("blocking", "threading", "processing")
ROUTES = [
    *(f"/{mode}" for mode in MODES),
    *(f"/{mode}/{name}" for mode in MODES for name in WORKLOADS),
    "/async", "/ping", "/workloads", "/stats", "/", "/nope", "/blocking/nope",
    "/race", "/race/options", "/static/app.js", "/static/style.css", "/static/nope.js",
]  # fmt: skip
STATIC_TYPES = {"/static/app.js": "text/javascript", "/static/style.css": "text/css"}
NAMES = sorted({p.name for w in WORKLOADS.values() for p in w.params} | {"delay", "fanout", "_"})

# What may appear raw in a request target: visible ASCII except '#', plus
# percent-escapes of arbitrary bytes (non-UTF-8 included) and some non-ASCII text.
raw_text = st.text(st.characters(min_codepoint=0x21, max_codepoint=0x7E, exclude_characters="#"), max_size=12)
escaped = st.binary(min_size=1, max_size=6).map(lambda b: "".join(f"%{c:02X}" for c in b))
numbers = st.one_of(
    st.integers(-(10**40), 10**40).map(str),
    st.floats(allow_nan=True, allow_infinity=True).map(repr),
    st.sampled_from(["nan", "NaN", "inf", "-inf", "1e309", "0x10", "1_000", "٥", "", "-0", "+1", " 1", "1.", ".5e-3"]),
)
names = st.one_of(st.sampled_from(NAMES), raw_text, escaped)
values = st.one_of(numbers, raw_text, escaped, st.sampled_from(["digits", "iris", "../../etc/passwd", "%00"]))
queries = st.lists(st.tuples(names, values), max_size=5).flatmap(
    lambda pairs: st.sampled_from(["&", ";"]).map(lambda sep: sep.join(f"{k}={v}" for k, v in pairs))
)

# Valid params that would take long are fine for the server but not for a
# fuzz test: keep every run this test triggers under a few milliseconds.
# Caps per workload, since one name means different costs (count's n=100000 is instant, fib's would never end).
CHEAP: dict[str, dict[str, float]] = {
    "count": {"n": 100_000},
    "fib": {"n": 20},
    "matmul": {"n": 100, "repeat": 3},
    "train": {"trees": 5},
    "predict": {"rows": 2000},
    "sleep": {"seconds": 0.01},
    "mix": {"compute_ms": 5.0, "wait_ms": 5.0},
    "page": {"rows": 100, "db_ms": 5.0},
    "async": {"delay": 0.01, "fanout": 5},
}


def _cheap_or_invalid(route: str, query: str) -> bool:
    try:
        args = urllib.parse.parse_qs(query, keep_blank_values=True, errors="strict", separator="&")
        parts = route.strip("/").split("/")
        if parts[0] == "async":
            workload = "async"
            params: dict[str, Any] = parse_params("async", ASYNC_PARAMS, args)
        elif parts[0] in MODES:
            workload = parts[1] if len(parts) > 1 else "count"
            params = WORKLOADS[workload].parse(args)  # defaults included: /threading/fib alone is fib(34)
        else:
            return True
    except (ParamError, KeyError, UnicodeDecodeError, ValueError):
        return True
    caps = CHEAP[workload]
    return all(not isinstance(v, int | float) or v <= caps.get(k, v) for k, v in params.items())


def _assert_lab_reply(reply: RawReply, route: str) -> None:
    assert 200 <= reply.status < 500, (reply.status, reply.body[:300])
    assert reply.headers["X-Content-Type-Options"] == "nosniff"  # every answer: no type guessed by a browser
    if route == "/" and reply.status == 200:
        assert reply.headers["Content-Type"].startswith("text/html")
        return
    if route in STATIC_TYPES and reply.status == 200:
        assert reply.headers["Content-Type"].startswith(STATIC_TYPES[route])
        return
    assert reply.headers["Content-Type"].startswith("application/json")
    body = reply.json()
    if reply.status >= 400:
        assert set(body) == {"error"}
        assert body["error"]["status"] == reply.status and body["error"]["message"]


@pytest.fixture(scope="module")
def fuzz_server() -> Iterator[InProcessLab]:
    # In-process (no server start-up to wait for), with a real process pool: valid requests run.
    yield from serve_in_process(Config(process_pool=1, thread_pool=2, job_timeout=5, access_log=False), pools=True)


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(route=st.sampled_from(ROUTES), query=queries)
def test_generated_query_strings_never_break_the_server(fuzz_server: InProcessLab, route: str, query: str) -> None:
    assume(_cheap_or_invalid(route, query))  # valid and slow: not what this test is about
    target = (route + ("?" + query if query else "")).encode()
    _assert_lab_reply(get_raw(fuzz_server.url, target), route)


@settings(max_examples=100, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(segment=st.one_of(raw_text, escaped, st.just("..")), mode=st.sampled_from(MODES))
def test_generated_paths_are_404_or_400(fuzz_server: InProcessLab, segment: str, mode: str) -> None:
    reply = get_raw(fuzz_server.url, f"/{mode}/{segment}x/{segment}".encode())
    assert reply.status in (400, 404), reply.body
    _assert_lab_reply(reply, "")


@pytest.mark.parametrize(
    ("request_bytes", "status", "fragment"),
    [
        (b"\x00\xff\xfe garbage\r\n\r\n", 400, "malformed HTTP request"),
        (b"GET /a b c HTTP/1.1\r\nHost: localhost\r\n\r\n", 400, "malformed HTTP request"),
        (b"GET /ping HTTP/1.1\r\nHost: localhost\r\nContent-Length: 999999\r\n\r\n", 400, "malformed HTTP request"),
        (b"GET /ping HTTP/1.1\r\nno colon here\r\n\r\n", 400, "malformed HTTP request"),
        (b"BREW /ping HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\n\r\n", 405, "Method Not Allowed"),
        (b"GET /" + b"a" * 20000 + b" HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\n\r\n", 414, "URI too long"),
        (b"GET /blocking/%C3%28 HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\n\r\n", 400, "Invalid unicode"),
        (b"GET /../../etc/passwd HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\n\r\n", 404, "no route"),
        (b"GET /blocking?n=%00 HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\n\r\n", 400, "n must be an integer"),
        (b"GET /\xff HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\n\r\n", 400, "raw byte 0xFF at 1"),
        (b"GET /blocking/caf\xc3\xa9 HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\n\r\n", 400, "percent-encode"),
    ],
    ids=[
        "garbage",
        "spaces",
        "body-too-large",
        "bad-header",
        "method",
        "long-path",
        "non-utf8-path",
        "traversal",
        "nul",
        "raw-0xff",
        "raw-utf8",
    ],
)
def test_hostile_requests(fuzz_server: InProcessLab, request_bytes: bytes, status: int, fragment: str) -> None:
    reply = exchange(fuzz_server.url, request_bytes)
    assert reply.status == status
    assert reply.json()["error"]["status"] == status
    assert fragment in reply.json()["error"]["message"]
    assert reply.headers["X-Content-Type-Options"] == "nosniff"
    assert get_raw(fuzz_server.url, b"/ping").json()["pong"] is True


@pytest.mark.parametrize(
    ("method", "target", "allow"),
    [(b"POST", b"/ping", "GET, HEAD"), (b"DELETE", b"/stats", "GET"), (b"PUT", b"/blocking", "GET"),
     (b"BREW", b"/workloads", "GET")],
)  # fmt: skip
def test_a_wrong_method_is_405_naming_the_methods_allowed(
    fuzz_server: InProcessLab, method: bytes, target: bytes, allow: str
) -> None:
    reply = get_raw(fuzz_server.url, target, method=method)
    assert reply.status == 405 and reply.json()["error"]["status"] == 405
    assert reply.headers["Allow"] == allow


def test_non_ascii_parameter_names_come_back_as_sent(fuzz_server: InProcessLab) -> None:
    # Percent-encoded UTF-8, as a browser sends it; Tornado decodes names as Latin-1.
    reply = get_raw(fuzz_server.url, b"/blocking?%C3%B1=1&caf%C3%A9=2")
    assert reply.status == 400
    message = reply.json()["error"]["message"]
    assert "'ñ'" in message or "'café'" in message, message
    assert get_raw(fuzz_server.url, b"/blocking?%FF=1").json()["error"]["message"] == "query string is not valid UTF-8"


HANDSHAKE = b"Upgrade: websocket\r\nConnection: Upgrade\r\nSec-WebSocket-Version: 13\r\n"


@pytest.mark.parametrize(
    ("headers", "status", "fragment"),
    [
        (b"", 400, "the lab page's WebSocket"),
        (b"Upgrade: websocket\r\n", 400, "Connection: Upgrade"),
        (HANDSHAKE + b"Origin: http://evil.example\r\nSec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\n", 403,
         "'http://evil.example' may not start races"),
        (b"Upgrade: websocket\r\nConnection: Upgrade\r\nSec-WebSocket-Version: 99\r\n", 426, "version"),
        (HANDSHAKE, 400, "Sec-WebSocket-Key"),
    ],
    ids=["no-upgrade", "no-connection", "cross-origin", "version", "no-key"],
)  # fmt: skip
def test_bad_websocket_handshakes_get_json_errors(fuzz_server: InProcessLab, headers, status, fragment) -> None:
    reply = get_raw(fuzz_server.url, b"/race", extra=headers)
    assert reply.status == status
    assert reply.headers["Content-Type"].startswith("application/json")
    assert fragment in reply.json()["error"]["message"]
    if status == 426:
        assert reply.headers["Sec-WebSocket-Version"] == "13"


def test_huge_headers_are_served(fuzz_server: InProcessLab) -> None:
    reply = get_raw(fuzz_server.url, b"/ping", extra=b"X-Filler: " + b"y" * 100_000 + b"\r\n")
    assert reply.status == 200 and reply.json()["pong"] is True


def test_server_survived_the_fuzzing(fuzz_server: InProcessLab) -> None:
    assert get_raw(fuzz_server.url, b"/blocking?n=7").json()["result"] == 7
    assert fuzz_server.errors == []  # nothing logged a traceback
