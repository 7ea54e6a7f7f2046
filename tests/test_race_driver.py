"""WS /race: the page's race driver, exercised without a browser against real servers."""

from __future__ import annotations

import asyncio
import json
import socket
import subprocess
import sys
from itertools import pairwise
from typing import Any

import pytest
from tornado.httpclient import HTTPClientError, HTTPRequest
from tornado.websocket import WebSocketClientConnection, websocket_connect

from handlers.race import BUSY, RaceInputError, RaceRequest
from lab import ROOT
from lab.runs import Run
from tests.conftest import StartServer
from tests.lab_server import LabServer, get
from tests.procs import running, wait_for

Event = dict[str, Any]


async def _connect(url: str, headers: dict[str, str] | None = None) -> WebSocketClientConnection:
    request = HTTPRequest(url.replace("http://", "ws://") + "/race", headers=headers or {}, connect_timeout=10)
    return await websocket_connect(request)


async def _read_all(ws: WebSocketClientConnection) -> list[Event]:
    """Every event until the server closes the connection (a minute at most)."""
    events: list[Event] = []
    async with asyncio.timeout(60):
        while True:
            message = await ws.read_message()
            if message is None:
                return events
            assert isinstance(message, str)
            events.append(json.loads(message))


def race_and_close_code(
    url: str, request: Any, headers: dict[str, str] | None = None
) -> tuple[list[Event], int | None]:
    """Send one race request (a dict, or raw text); every event the server sent, and its close code."""

    async def go() -> tuple[list[Event], int | None]:
        ws = await _connect(url, headers)
        await ws.write_message(request if isinstance(request, str) else json.dumps(request))
        return await _read_all(ws), ws.close_code

    return asyncio.run(go())


def run_race(url: str, request: Any, headers: dict[str, str] | None = None) -> list[Event]:
    """Send one race request (a dict, or raw text) and return every event the server sent."""
    return race_and_close_code(url, request, headers)[0]


def events_cores(events: list[Event]) -> int:
    """The server's cores, as the race event says."""
    return int(next(e for e in events if e["event"] == "race")["server"]["cpu_count"])


def test_a_processing_race_streams_every_event_in_order(start_server: StartServer) -> None:
    lab = start_server("--process-pool", "2", "--no-access-log")
    request = {"mode": "processing", "workload": "count", "params": {"n": "300000"}, "concurrency": 4}
    streamed = run_race(lab.url, request)
    # First the warm-up (a second of it), each request as it ends: rounds of as many as can run at once.
    warmups = [e for e in streamed if e["event"] == "warmup"]
    kinds = [e["event"] for e in streamed]
    assert kinds[0] == "start" and kinds[1 : 1 + len(warmups)] == ["warmup"] * len(warmups)
    at_once = min(2, events_cores(streamed))  # rounds of as many as can run: two pool workers, the cores allowing
    assert warmups and len(warmups) % at_once == 0 and all(e["status"] == 200 for e in warmups)
    events = [e for e in streamed if e["event"] != "warmup"]
    kinds = [e["event"] for e in events]

    # The solo runs t comes from, each as it ends, then the race.
    assert kinds[:5] == ["start", "solo", "solo", "solo", "race"] and kinds[-1] == "done", kinds
    assert set(kinds[5:-1]) <= {"response", "pings"} and kinds.count("response") == 4
    start, race, done = events[0], events[4], events[-1]
    assert [(e["run"], e["of"]) for e in events[1:4]] == [(1, 3), (2, 3), (3, 3)]
    assert sorted(e["seconds"] for e in events[1:4]) == sorted(race["solo_samples_s"])
    assert start == {"event": "start", "mode": "processing", "workload": "count", "params": {"n": 300000},
                     "concurrency": 4}  # fmt: skip
    # The load generator aimed at the server's own address.
    assert race["url"] == f"{lab.url}/processing/count?n=300000"
    assert race["solo_s"] > 0 and race["server"]["process_pool"] == 2

    responses = [e for e in events if e["event"] == "response"]
    assert sorted(r["index"] for r in responses) == [0, 1, 2, 3]
    for response in responses:
        assert response["status"] == 200
        body = response["body"]
        assert body["mode"] == "processing" and body["result"] == 300_000
        assert body["server"]["pid"] == lab.pid and body["worker"]["pid"] != lab.pid
        timing = body["timing"]
        assert response["sent"] <= timing["received"] <= timing["started"] <= timing["finished"] <= response["received"]
    # The probes, a batch per 0.1 s (the page draws the worst of each, and the GIL meter's reading).
    batches = [e for e in events if e["event"] == "pings"]
    assert batches and all(b["count"] >= 1 and b["from"] <= b["to"] for b in batches)
    assert sum(b["count"] for b in batches) == done["summary"]["ping_count"]
    assert race["capacity"]["copies"] == race["server"]["cpu_count"]  # runs can go at once: measured

    summary = done["summary"]
    assert summary["mode"] == "processing" and summary["concurrency"] == 4
    assert summary["transactions"] == 4 and summary["failed"] == 0
    assert summary["lanes"] == min(2, summary["cores"])
    assert summary["ideal_s"] > 0 and summary["ratio"] > 0
    assert wait_for(lambda: not lab.load_generators())


def test_a_blocking_race_warms_up_one_request_at_a_time(server: LabServer) -> None:
    # Two at once would hold the event loop for both, and the page would see neither until both had run.
    events = run_race(server.url, {"mode": "blocking", "workload": "sleep", "params": {"seconds": 0.2},
                                   "concurrency": 2})  # fmt: skip
    warmups = [e for e in events if e["event"] == "warmup"]
    assert len(warmups) >= 2 and all(e["status"] == 200 for e in warmups)
    assert all(later["sent"] >= earlier["received"] for earlier, later in pairwise(warmups))
    assert events[-1]["event"] == "done"


def test_an_async_race_takes_async_params(server: LabServer) -> None:
    events = run_race(server.url, {"mode": "async", "params": {"delay": 0.1, "fanout": 2}, "concurrency": 3})
    assert events[0]["params"] == {"delay": 0.1, "fanout": 2} and events[0]["workload"] == "upstream"
    assert events[-1]["event"] == "done"
    assert events[-1]["summary"]["transactions"] == 3


@pytest.mark.parametrize(
    ("request_text", "message"),
    [
        ("not json", "not JSON"),
        ("[1, 2]", "JSON object"),
        (
            json.dumps({"mode": "turbo"}),
            "mode must be one of: blocking, threading, processing, interpreters, distributed, async",
        ),
        (json.dumps({"mode": "processing", "workload": "nope"}), "unknown workload"),
        (
            json.dumps({"mode": "processing", "workload": "count", "params": {"n": "0"}}),
            "n must be an integer between 1",
        ),
        (json.dumps({"mode": "threading", "workload": "count", "params": {"N": "5"}}), "unknown parameter 'N'"),
        (json.dumps({"mode": "blocking", "workload": "sleep", "params": {"seconds": True}}), "string or a number"),
        (json.dumps({"mode": "async", "params": {"delay": "31"}}), "delay must be a number between 0 and 30"),
        (json.dumps({"mode": "async", "params": {"fanout": 51}}), "fanout must be an integer between 1 and 50"),
        (json.dumps({"mode": "blocking", "concurrency": 51}), "concurrency must be an integer between 1 and 50"),
        (json.dumps({"mode": "blocking", "concurrency": 0}), "concurrency must be an integer between 1 and 50"),
        (json.dumps({"mode": "blocking", "concurrency": "ten"}), "concurrency must be an integer"),
        (json.dumps({"mode": "blocking", "url": "http://example.com"}), "unknown field(s) url"),
    ],
)
def test_bad_input_is_one_clear_error_event(server: LabServer, request_text: str, message: str) -> None:
    events = run_race(server.url, request_text)
    assert len(events) == 1, events
    assert events[0]["event"] == "error"
    assert message in events[0]["message"]
    assert get(f"{server.url}/ping").status == 200
    assert not server.load_generators()


@pytest.mark.parametrize(
    ("request_text", "code", "message"),
    [
        (json.dumps({"mode": "blocking", "params": {"pad": "x" * 10_000}}), 1009, "at most 4096"),
        ('{"mode":"threading","params":' + "[" * 1000 + "]" * 1000 + "}", 1007, "nests deeper than 4"),
        ("[" * 5 + "]" * 5, 1007, "nests deeper"),
        ('{"mode": "blocking", "params": {"n": "1"', 1007, "not JSON"),
        (json.dumps({"mode": "turbo"}), 1008, "mode must be one of"),
    ],
    ids=["too-big", "nested-1000", "nested-5", "truncated", "bad-mode"],
)
def test_a_malformed_message_gets_an_error_event_and_a_close_code(
    server: LabServer, request_text: str, code: int, message: str
) -> None:
    events, close_code = race_and_close_code(server.url, request_text)
    assert [e["event"] for e in events] == ["error"] and message in events[0]["message"], events
    assert close_code == code
    assert get(f"{server.url}/ping").status == 200
    assert "Traceback" not in server.log()  # a RecursionError would have been one


def test_a_message_past_the_frame_limit_is_refused_unread(server: LabServer) -> None:
    events, close_code = race_and_close_code(server.url, "x" * 100_000)
    assert (events, close_code) == ([], 1009)  # Tornado's "message too big": no page sends one
    assert get(f"{server.url}/ping").status == 200


def test_the_race_ignores_the_host_header(server: LabServer) -> None:
    # Anyone could otherwise aim the load generator at any host (this one
    # answers to every loopback name, whatever the port).
    events = run_race(
        server.url,
        {"mode": "blocking", "workload": "sleep", "params": {"seconds": "0"}, "concurrency": 1},
        headers={"Host": "localhost:80"},
    )
    race = next(e for e in events if e["event"] == "race")
    assert race["url"].startswith(f"{server.url}/blocking/sleep")
    assert events[-1]["event"] == "done"


def test_a_rebound_page_cannot_start_races(server: LabServer) -> None:
    # DNS rebinding: the page's own name, pointed at this machine; Host and Origin agree.
    port = server.url.rsplit(":", 1)[1]
    with pytest.raises(HTTPClientError) as refused:
        asyncio.run(_connect(server.url, {"Host": f"evil.example:{port}", "Origin": f"http://evil.example:{port}"}))
    assert refused.value.code == 403
    assert not server.load_generators()


def test_cross_origin_pages_cannot_start_races(server: LabServer) -> None:
    with pytest.raises(HTTPClientError) as refused:
        asyncio.run(_connect(server.url, {"Origin": "http://attacker.example"}))
    assert refused.value.code == 403


def test_plain_get_is_a_json_error(server: LabServer) -> None:
    reply = get(f"{server.url}/race")
    assert reply.status == 400
    assert "WebSocket" in reply.json()["error"]["message"]


def test_options_publish_the_limits_the_driver_enforces(server: LabServer) -> None:
    options = get(f"{server.url}/race/options").json()
    assert options["modes"] == ["blocking", "threading", "processing", "interpreters", "distributed", "async"]
    assert (options["concurrency"]["min"], options["concurrency"]["max"], options["concurrency"]["default"]) == (
        1,
        50,
        10,
    )
    limits = {p["name"]: (p["min"], p["max"]) for p in options["async_params"]}
    assert limits == {"delay": (0.0, 30.0), "fanout": (1, 50)}


def test_one_race_at_a_time_and_a_disconnect_kills_the_load_generator(start_server: StartServer) -> None:
    lab = start_server("--process-pool", "2", "--no-access-log")
    # Left alone this race would run for 15 s (a solo run, then two rounds of two).
    slow = {"mode": "processing", "workload": "sleep", "params": {"seconds": "5"}, "concurrency": 4}

    async def scenario() -> tuple[list[Event], list[int]]:
        first = await _connect(lab.url)
        await first.write_message(json.dumps(slow))
        assert json.loads(await first.read_message() or "{}")["event"] == "start"
        generators = await asyncio.to_thread(wait_for, lambda: bool(lab.load_generators()))
        assert generators, "no load generator started"
        pids = [p.pid for p in lab.load_generators()]
        second = await _connect(lab.url)
        await second.write_message(json.dumps(slow))
        refused = await _read_all(second)
        first.close()  # the page goes away mid-race
        return refused, pids

    refused, pids = asyncio.run(scenario())
    assert [e["event"] for e in refused] == ["error"]
    assert refused[0]["message"] == BUSY
    assert wait_for(lambda: not any(running(pid) for pid in pids))
    assert not lab.load_generators()
    assert get(f"{lab.url}/ping").status == 200
    # The gate opened again: the next race runs.
    events = run_race(
        lab.url, {"mode": "processing", "workload": "sleep", "params": {"seconds": "0"}, "concurrency": 2}
    )
    assert events[-1]["event"] == "done"


def test_server_shutdown_leaves_no_load_generator(start_server: StartServer) -> None:
    lab = start_server("--process-pool", "2", "--grace", "1", "--no-access-log")

    async def scenario() -> tuple[list[int], int | None]:
        ws = await _connect(lab.url)
        await ws.write_message(json.dumps({"mode": "threading", "workload": "sleep", "params": {"seconds": "5"},
                                           "concurrency": 3}))  # fmt: skip
        assert await asyncio.to_thread(wait_for, lambda: bool(lab.load_generators()))
        pids = [p.pid for p in lab.load_generators()]
        lab.remember_descendants()
        code = await asyncio.to_thread(lab.terminate)  # SIGTERM mid-race
        ws.close()
        return pids, code

    pids, code = asyncio.run(scenario())
    assert code is not None, "server did not stop"
    # Gone by the time the server has exited: it did not just notice later that its target died.
    assert not any(running(pid) for pid in pids)
    assert lab.survivors() == []


def test_request_parsing_and_command_line() -> None:
    request = RaceRequest.parse(json.dumps({"mode": "threading", "workload": "sleep", "params": {"seconds": 0.5},
                                            "concurrency": "7"}))  # fmt: skip
    assert request == RaceRequest(Run("threading", "sleep", {"seconds": 0.5}), 7)
    assert request.command("http://127.0.0.1:9")[1:] == [
        "-m", "lab.race", "--url", "http://127.0.0.1:9", "--mode", "threading", "--workload", "sleep",
        "--warmup", "1", "-p", "seconds=0.5", "-c", "7",
    ]  # fmt: skip
    defaults = RaceRequest.parse(json.dumps({"mode": "processing"}))
    assert defaults == RaceRequest(Run("processing", "count", {"n": 30_000_000}), 10)
    asynchronous = RaceRequest.parse(json.dumps({"mode": "async"}))
    assert "--workload" not in asynchronous.command("http://127.0.0.1:9")
    awaited = RaceRequest.parse(json.dumps({"mode": "async", "workload": "mix", "params": {"wait_ms": 5}}))
    assert {"--workload", "mix", "wait_ms=5.0"} <= set(awaited.command("http://127.0.0.1:9"))
    with pytest.raises(RaceInputError, match="awaits only"):
        RaceRequest.parse(json.dumps({"mode": "async", "workload": "count"}))
    with pytest.raises(RaceInputError):
        RaceRequest.parse(b'{"mode": "blocking"}')


def test_a_race_that_cannot_reach_its_server_ends_with_one_error_line() -> None:
    with socket.socket() as closed:  # a port nothing listens on once this socket is closed
        closed.bind(("127.0.0.1", 0))
        port = closed.getsockname()[1]
    command = [sys.executable, "-m", "lab.race", "--url", f"http://127.0.0.1:{port}", "--mode", "threading", "-c", "1"]
    done = subprocess.run(command, cwd=ROOT, capture_output=True, text=True, timeout=60, check=False)
    lines = [json.loads(line) for line in done.stdout.splitlines()]
    assert done.returncode == 1
    assert [line["event"] for line in lines] == ["error"] and lines[0]["message"]
