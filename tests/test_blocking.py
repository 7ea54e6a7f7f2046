"""/blocking: runs on the IOLoop thread of the server process, one at a time."""

from __future__ import annotations

import itertools
import socket
import time
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import pytest

from tests.envelopes import any_overlap, assert_envelope, run_intervals
from tests.lab_server import LabServer, Reply, copies, get, get_many, sent, sent_stamped
from tests.procs import wait_for


def test_envelope_and_result(server: LabServer) -> None:
    body = get(f"{server.url}/blocking?n=12345").json()
    assert_envelope(body, "blocking", "count")
    assert body["result"] == 12345
    assert body["params"] == {"n": 12345}
    assert body["server"] == {"pid": server.pid, "task_id": None}
    assert body["worker"] == {"pid": server.pid, "thread": "MainThread"}


def test_concurrent_runs_never_overlap(server: LabServer) -> None:
    replies = get_many(copies(f"{server.url}/blocking/sleep?seconds=0.2", 4))
    assert all(r.status == 200 for r in replies)
    assert not any_overlap(run_intervals(replies))
    assert {(r.json()["worker"]["pid"], r.json()["worker"]["thread"]) for r in replies} == {(server.pid, "MainThread")}


def _staircase(url: str) -> tuple[list[Reply], float]:
    """Four 0.3 s runs sent from this thread, in start order, and when the last request was in the kernel."""
    with ThreadPoolExecutor(4) as pool:
        jobs = [sent_stamped(each, pool) for each in copies(f"{url}/blocking/sleep?seconds=0.3", 4)]
        all_sent = time.time()
        return sorted((job.result() for job in jobs), key=lambda r: r.json()["timing"]["started"]), all_sent


def test_each_response_leaves_before_the_next_run_ends(server: LabServer) -> None:
    # A staircase: the first client is answered after one run, not after all of them. Only runs that queue show it
    # (they could cut in before an answer is written): all four must be in the kernel before the first ends, which a
    # stall of this thread between the sends can undo, so that is checked, and tried again.
    for _ in range(3):
        replies, all_sent = _staircase(server.url)
        if all_sent < replies[0].json()["timing"]["finished"]:
            break
    else:
        pytest.fail("three times a request was sent only after the first run had ended: nothing queued")
    # When an answer left is the kernel's stamp of its arrival: its client's thread may wake later than a run lasts.
    for answered, following in itertools.pairwise(replies):
        assert answered.arrived is not None and answered.arrived < following.json()["timing"]["finished"]


def _ping_during_a_run(url: str) -> tuple[dict[str, Any], Reply, float]:
    """A 2 s run, and a /ping sent from this thread 0.8 s after it: the run's timing, the ping's reply, and when
    the ping was in the kernel."""
    with ThreadPoolExecutor(2) as pool:
        job = sent(f"{url}/blocking/sleep?seconds=2", pool)
        time.sleep(0.8)  # (a blocked server cannot say it has begun: the envelope says so afterwards)
        ping = sent_stamped(f"{url}/ping", pool)
        ping_sent = time.time()
        return job.result().json()["timing"], ping.result(), ping_sent


def test_a_ping_during_a_run_waits_for_it(server: LabServer) -> None:
    # Only a ping that reached the server while the run held its loop shows it: sent after the run began and in the
    # kernel before it ended. The 0.8 s head start promises neither on a busy machine: checked, and tried again.
    for _ in range(3):
        ran, ping, ping_sent = _ping_during_a_run(server.url)
        if ran["started"] < ping.sent and ping_sent < ran["finished"]:
            break
    else:
        pytest.fail("three times the ping did not reach the server while the run held its loop")
    assert ping.status == 200
    # Answered only once the run was over: the kernel's stamp of the answer's arrival, however late this thread read it.
    assert ping.arrived is not None and ping.arrived >= ran["finished"]


def _blocking_totals(url: str) -> dict[str, Any]:
    totals: dict[str, dict[str, Any]] = get(f"{url}/stats").json()["totals"]["requests"]
    return totals.get("blocking", {"count": 0, "timed": 0, "statuses": {}})


def test_runs_whose_clients_left_before_their_turn_are_dropped(server: LabServer) -> None:
    # Four requests sent and closed at once: each waits in line behind the one
    # before it, and a blocking run cannot be stopped once begun; one whose
    # client has already gone is not begun (499), so /ping waits at most one run.
    before = _blocking_totals(server.url)
    host, port = server.url.removeprefix("http://").rsplit(":", 1)
    for i in range(4):
        with socket.create_connection((host, int(port))) as sock:
            sock.sendall(b"GET /blocking/fib?n=27&_=%d HTTP/1.1\r\nHost: localhost\r\n\r\n" % i)
    assert get(f"{server.url}/ping").status == 200
    assert wait_for(lambda: _blocking_totals(server.url)["count"] == before["count"] + 4)
    after = _blocking_totals(server.url)
    ran = after["timed"] - before["timed"]
    dropped = after["statuses"].get("499", 0) - before["statuses"].get("499", 0)
    answered = after["statuses"].get("200", 0) - before["statuses"].get("200", 0)
    # The one that ran, if any, is a 499 too when its client had gone by its end (it went at once).
    assert ran <= 1 and answered <= ran and dropped + answered == 4, after


def test_a_run_whose_client_left_while_it_ran_is_a_499_and_its_cpu_counts(server: LabServer) -> None:
    # A run holds the loop, so it cannot see its client go; at its end the kernel says the client has gone: no
    # answer, a 499, as for a pool job whose client left while it ran. Tried again if the run had not begun by
    # the time its client left (the server slow to read it): that one is a 499 never run, the test above's case.
    host, port = server.url.removeprefix("http://").rsplit(":", 1)
    for attempt in range(3):
        before = _blocking_totals(server.url)
        with socket.create_connection((host, int(port))) as sock:
            sock.sendall(b"GET /blocking/sleep?seconds=1.5&_=%d HTTP/1.1\r\nHost: localhost\r\n\r\n" % attempt)
            time.sleep(0.5)
            sock.setblocking(False)
            with pytest.raises(BlockingIOError):
                sock.recv(1)  # nothing answered yet: gone before the run's end
        counted = before["count"] + 1
        assert wait_for(lambda: _blocking_totals(server.url)["count"] == counted)  # noqa: B023 (called here only)
        after = _blocking_totals(server.url)
        assert after["statuses"].get("499", 0) - before["statuses"].get("499", 0) == 1, after
        if after["timed"] - before["timed"] == 1:
            assert after["statuses"].get("200", 0) == before["statuses"].get("200", 0)
            return
    pytest.fail("the server never began the run within half a second of its request, in three tries")
