"""Hosts and sites: a rebound name is refused on every route, the loopback names are served, cross-site work is not."""

from __future__ import annotations

import argparse
import asyncio
from collections.abc import Iterator

import pytest
from tornado.httpclient import HTTPClientError, HTTPRequest
from tornado.websocket import websocket_connect

from lab.config import Config, parse_args
from lab.web.hosts import ANSWERS_KEPT, AllowedHosts, allowed_host_arg, host_name
from tests.inproc import InProcessLab, serve_in_process
from tests.rawhttp import get_raw

# Every kind of route: the page, a static file, a probe, the stats and metrics, a work route, the WebSocket's.
ROUTES = [b"/", b"/static/app.js", b"/ping", b"/stats", b"/metrics", b"/workloads", b"/blocking/sleep?seconds=0",
          b"/async?delay=0", b"/race/options", b"/nope"]  # fmt: skip
HANDSHAKE = (
    b"Upgrade: websocket\r\nConnection: Upgrade\r\nSec-WebSocket-Version: 13\r\n"
    b"Sec-WebSocket-Key: a2V5a2V5a2V5a2V5a2V5a2V5\r\n"
)


@pytest.fixture(scope="module")
def lab() -> Iterator[InProcessLab]:
    yield from serve_in_process(Config(thread_pool=2, process_pool=1, access_log=False, allow_host=("lab.example",)))


def _runs(lab: InProcessLab) -> int:
    """Blocking runs done so far (each reports its CPU time: `timed`)."""
    totals = get_raw(lab.url, b"/stats").json()["totals"]["requests"]
    return int(totals.get("blocking", {}).get("timed", 0))


@pytest.mark.parametrize("route", ROUTES)
def test_a_rebound_name_is_refused_on_every_route(lab: InProcessLab, route: bytes) -> None:
    port = lab.url.rsplit(":", 1)[1].encode()
    reply = get_raw(
        lab.url, route, host=b"evil.example:" + port, extra=b"Origin: http://evil.example:" + port + b"\r\n"
    )
    assert reply.status == 403
    message = reply.json()["error"]["message"]
    assert "'evil.example:" in message and "--allow-host evil.example" in message
    assert reply.headers["X-Content-Type-Options"] == "nosniff"


def test_the_race_websocket_refuses_a_rebound_name_before_the_handshake(lab: InProcessLab) -> None:
    before = _runs(lab)
    reply = get_raw(lab.url, b"/race", host=b"evil.example", extra=HANDSHAKE + b"Origin: http://evil.example\r\n")
    assert reply.status == 403 and "DNS rebinding" in reply.json()["error"]["message"]
    assert _runs(lab) == before


@pytest.mark.parametrize(
    "host", [b"127.0.0.1", b"127.0.0.1:1", b"localhost", b"LocalHost:8000", b"localhost.", b"[::1]", b"[::1]:8000",
             b"127.0.0.2:80", b"lab.example", b"lab.example:443"],
)  # fmt: skip
def test_the_loopback_names_and_the_allowed_ones_are_served_with_any_port(lab: InProcessLab, host: bytes) -> None:
    assert get_raw(lab.url, b"/ping", host=host).status == 200


def test_the_race_websocket_checks_the_pages_origin_against_the_same_names(lab: InProcessLab) -> None:
    async def handshake(origin: str) -> int:
        request = HTTPRequest(lab.url.replace("http://", "ws://") + "/race", headers={"Origin": origin})
        try:
            connection = await websocket_connect(request)
        except HTTPClientError as error:
            return error.code
        connection.close()
        return 101

    async def all_of_them() -> list[int]:
        return [await handshake(o) for o in ("http://evil.example", "null", "http://localhost:3000", lab.url)]

    assert asyncio.run(all_of_them()) == [403, 403, 101, 101]


@pytest.mark.parametrize("site", [None, b"same-origin", b"same-site", b"none"])
def test_work_is_served_to_non_browsers_and_pages_of_this_site(lab: InProcessLab, site: bytes | None) -> None:
    extra = b"Sec-Fetch-Site: " + site + b"\r\n" if site else b""
    before = _runs(lab)
    reply = get_raw(lab.url, b"/blocking/sleep?seconds=0", extra=extra)
    assert reply.status == 200 and reply.json()["mode"] == "blocking"
    assert _runs(lab) == before + 1


@pytest.mark.parametrize("route", [b"/blocking/sleep?seconds=0", b"/threading/sleep?seconds=0", b"/async?delay=0"])
def test_a_cross_site_request_runs_no_work(lab: InProcessLab, route: bytes) -> None:
    before = _runs(lab)
    reply = get_raw(lab.url, route, extra=b"Sec-Fetch-Site: cross-site\r\nSec-Fetch-Mode: no-cors\r\n")
    assert reply.status == 403
    assert "Sec-Fetch-Site: cross-site" in reply.json()["error"]["message"]
    assert _runs(lab) == before
    # The page itself is no work: a link from another site opens it.
    assert get_raw(lab.url, b"/", extra=b"Sec-Fetch-Site: cross-site\r\nSec-Fetch-Mode: navigate\r\n").status == 200


def test_host_names_are_read_as_browsers_write_them() -> None:
    assert [host_name(h) for h in ("LOCALHOST:80", "[::1]:8000", "[::1]", "example.com.", "a:b", "[::1", "")] == [
        "localhost", "::1", "::1", "example.com", None, None, None]  # fmt: skip
    hosts = AllowedHosts(["lab.example", ".corp.example"], bound="0.0.0.0")
    assert [hosts.allows(h) for h in ("x.corp.example", "corp.example", "evilcorp.example", "0.0.0.0")] == [
        True, True, False, False]  # fmt: skip
    assert AllowedHosts(bound="192.168.1.10").allows("192.168.1.10:8000")  # the address it was bound to
    assert AllowedHosts(bound="2001:db8::5").allows("[2001:db8::5]:8000")
    assert AllowedHosts(["*"]).allows("anything.example")


def test_allow_host_takes_names_and_repeats() -> None:
    config = parse_args(["--allow-host", "Lab.Example", "--allow-host", "[::2]", "--allow-host", ".corp.example"])
    assert config.allow_host == ("lab.example", "::2", ".corp.example")
    assert parse_args([]).allow_host == ()
    for bad in ("http://lab.example", "lab.example:8000", "a b", ""):
        with pytest.raises(argparse.ArgumentTypeError):
            allowed_host_arg(bad)


def test_the_answers_kept_per_host_header_stay_right_and_bounded() -> None:
    hosts = AllowedHosts(["lab.example"])
    for _ in range(2):  # asked again: the kept answer is the same
        assert [hosts.allows(h) for h in ("lab.example:8000", "evil.example", "127.0.0.1:1")] == [True, False, True]
    for i in range(3 * ANSWERS_KEPT):  # a crowd of names: refused, and the store does not grow past its bound
        assert not hosts.allows(f"n{i}.example")
        assert len(hosts._answers) <= ANSWERS_KEPT
    assert hosts.allows("lab.example:8000") and not hosts.allows("evil.example")
