"""Open files as a budget: a crowd past it gets 503s, a full table pauses accepting, descriptors return to rest."""

from __future__ import annotations

import socket
from collections import Counter

from lab.web.descriptors import RESERVE, DescriptorBudget
from tests.conftest import StartServer
from tests.lab_server import LabServer, copies, get, get_many
from tests.procs import wait_for

# The server's open-files limit (soft and hard): RESERVE plus room for 80 descriptors of /async waits.
OPEN_FILES = RESERVE + 80


def _at_rest(lab: LabServer, rest: dict[str, int]) -> bool:
    now = lab.descriptors()
    return all(now[who] <= count + 2 for who, count in rest.items())


def test_a_crowd_past_the_budget_gets_503s_and_the_descriptors_return_to_rest(start_server: StartServer) -> None:
    lab = start_server("--process-pool", "1", "--thread-pool", "1", "--upstream-idle", "1", open_files=OPEN_FILES)
    rest = lab.descriptors()
    assert set(rest) == {"server", "upstream"}
    # 60 waits of 10 calls each would hold 660 descriptors here and 600 in the upstream: more than either
    # process may open at all. The budget admits 80 / 11 at a time, each for 2 s; the others are told to
    # come back (fewer than 30 refused would take arrivals spread over 8 s).
    replies = get_many(copies(f"{lab.url}/async?delay=2&fanout=10", 60))
    statuses = Counter(reply.status for reply in replies)
    assert set(statuses) == {200, 503} and statuses[503] >= 30, statuses
    refused = [reply for reply in replies if reply.status == 503]
    assert all(r.headers["Retry-After"] == "1" and "descriptor budget" in r.json()["error"]["message"] for r in refused)
    pool = get(f"{lab.url}/stats").json()["processes"][0]["pools"]["async"]
    assert pool["rejected"] == statuses[503] and pool["budget"] == 80
    # The pooled client's idle connections close after --upstream-idle, and the upstream's with them.
    assert wait_for(lambda: _at_rest(lab, rest), timeout=20), (lab.descriptors(), rest)
    assert "Traceback" not in lab.log() and "Too many open files" not in lab.log()  # no process ran out


def test_with_no_descriptor_left_the_server_pauses_accepting_instead_of_failing(start_server: StartServer) -> None:
    lab = start_server("--process-pool", "1", "--thread-pool", "1", "--no-access-log", open_files=OPEN_FILES)
    host, port = lab.url.removeprefix("http://").rsplit(":", 1)
    idle = []
    try:  # idle clients, more than its table holds: the rest wait in its listen queue
        idle = [socket.create_connection((host, int(port))) for _ in range(OPEN_FILES + 20)]
        assert wait_for(lambda: "Too many open files" in lab.log())
    finally:
        for sock in idle:
            sock.close()
    assert get(f"{lab.url}/ping", timeout=30).status == 200  # it accepts again once descriptors are free
    log = lab.log()
    assert log.count("accept: Too many open files") == 1, log[-2000:]  # one warning, however many tries
    assert "Traceback" not in log


def test_idle_connections_make_room_and_each_wait_costs_its_client_and_its_calls() -> None:
    budget = DescriptorBudget(RESERVE + 100, processes=2)
    assert (budget.own, budget.upstream_share) == (100, 50)  # one embedded upstream serves both processes
    assert budget.admit(fanout=9, idle=0) == 0 and budget.held == 10
    assert budget.admit(fanout=9, idle=45) == 13  # 18 calls + 45 idle connections > 50: close 13 of them
    budget.release(9)
    budget.release(9)
    assert (budget.held, budget.waits, budget.rejected) == (0, 0, 0)
