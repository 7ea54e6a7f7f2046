"""/blocking: runs on the IOLoop thread of the server process, one at a time."""

from __future__ import annotations

import itertools

from tests.envelopes import any_overlap, assert_envelope, run_intervals
from tests.lab_server import LabServer, copies, get, get_many, probe_during


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


def test_each_response_leaves_before_the_next_run_ends(server: LabServer) -> None:
    # A staircase: the first client is answered after one run, not after all of them.
    replies = sorted(get_many(copies(f"{server.url}/blocking/sleep?seconds=0.3", 4)),
                     key=lambda r: r.json()["timing"]["started"])  # fmt: skip
    for answered, following in itertools.pairwise(replies):
        assert answered.received < following.json()["timing"]["finished"]


def test_a_ping_during_a_run_waits_for_it(server: LabServer) -> None:
    [job], ping = probe_during([f"{server.url}/blocking/sleep?seconds=2"], f"{server.url}/ping")
    ran = job.json()["timing"]
    assert ran["started"] < ping.sent < ran["finished"]
    assert ping.status == 200
    assert ping.received >= ran["finished"]
