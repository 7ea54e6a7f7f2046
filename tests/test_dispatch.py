"""--accept dispatch: the forked parent accepts and hands each connection to the least busy child."""

from __future__ import annotations

import os
import signal
import socket
import time
from collections import Counter
from concurrent.futures import Future, ThreadPoolExecutor
from urllib.parse import urlsplit

import psutil
import pytest

from lab.config import build_parser, parse_args
from tests.conftest import StartServer
from tests.lab_server import LabServer, Reply, copies, get, get_many, probe_during, sent
from tests.procs import STALL_S, wait_for

DISPATCH = ("--processes", "2", "--process-pool", "1", "--accept", "dispatch")


def _spread(replies: list[Reply]) -> list[int]:
    """Requests per server process, most first."""
    return sorted(Counter(r.json()["server"]["pid"] for r in replies).values(), reverse=True)


def _children(lab: LabServer) -> set[int]:
    """The server processes: the parent's children other than the embedded upstream."""
    kids = psutil.Process(lab.pid).children()
    return {p.pid for p in kids if "upstream" not in " ".join(p.cmdline())}


def test_dispatch_is_the_default_when_forked() -> None:
    assert parse_args(["--processes", "2"]).accept == "dispatch"
    assert "(default: dispatch" in " ".join(build_parser().format_help().split())


def test_a_burst_is_spread_evenly_and_the_parent_serves_nothing(start_server: StartServer) -> None:
    lab = start_server(*DISPATCH)
    # A blocking sleep fills its child's event loop but no core: only the dispatch decides, every burst.
    for _ in range(3):
        replies = get_many(copies(f"{lab.url}/blocking/sleep?seconds=0.2", 10))
        assert [r.status for r in replies] == [200] * 10
        assert len(_spread(replies)) == 2 and _spread(replies)[1] >= 4, _spread(replies)
    answered = {r.json()["server"]["pid"] for r in replies}
    assert answered == _children(lab) and lab.pid not in answered
    assert {r.json()["server"]["task_id"] for r in replies} == {0, 1}
    assert "accept policy dispatch" in lab.log()


def _ipv6_loopback() -> bool:
    try:
        with socket.socket(socket.AF_INET6) as sock:
            sock.bind(("::1", 0))
        return True
    except OSError:
        return False


@pytest.mark.skipif(not _ipv6_loopback(), reason="this machine has no IPv6 loopback (::1)")
def test_connections_over_ipv6_reach_both_children(start_server: StartServer) -> None:
    # Every other test here serves IPv4: the parent hands over connections of either family (with the
    # family's byte), and the children answer them.
    lab = start_server(*DISPATCH, "--host", "::1")
    assert lab.url.startswith("http://[::1]:")
    replies = get_many(copies(f"{lab.url}/blocking/sleep?seconds=0.2", 4))
    assert [r.status for r in replies] == [200] * 4
    assert {r.json()["server"]["pid"] for r in replies} == _children(lab)


def test_ping_is_answered_while_every_child_computes(start_server: StartServer) -> None:
    # Under --accept fair both children would be full and stop accepting: the probe would wait in the
    # kernel's queue until a run ended. Dispatched, it reaches a child whose event loop is free.
    lab = start_server(*DISPATCH)
    # The premise, both children computing, is what the burst-spread tests prove of dispatch; a loaded
    # machine can still deliver a burst to one child now and then (its reports racing the connections),
    # so a burst that landed on one child is sent again, up to three times.
    for _ in range(3):
        jobs, ping = probe_during(
            copies(f"{lab.url}/threading/count?n=15000000", 4),
            f"{lab.url}/ping",
            running=lambda: (
                sum(p["pools"]["threading"]["running"] for p in get(f"{lab.url}/stats").json()["processes"]) == 4
            ),
        )
        assert [j.status for j in jobs] == [200] * 4 and ping.status == 200
        if len({j.json()["server"]["pid"] for j in jobs}) == 2:
            break
    assert len({j.json()["server"]["pid"] for j in jobs}) == 2  # both children were computing
    assert ping.received < min(j.json()["timing"]["finished"] for j in jobs)


def test_a_client_that_sends_nothing_blocks_no_one(start_server: StartServer) -> None:
    lab = start_server(*DISPATCH)
    address = urlsplit(lab.url)
    silent = [socket.create_connection((address.hostname, address.port)) for _ in range(4)]
    try:
        # Answered while the four still hold their connections, open and unanswered: nobody read them before
        # handing them on (a parent that waited for their request would answer no one), nor hung up on them.
        replies = get_many(copies(f"{lab.url}/processing/count?n=1000", 6), timeout=STALL_S)
        assert [r.status for r in replies] == [200] * 6
        for sock in silent:
            with pytest.raises(BlockingIOError):  # still open, nothing written to it
                sock.recv(1, socket.MSG_PEEK | socket.MSG_DONTWAIT)
    finally:
        for sock in silent:
            sock.close()


def test_a_killed_child_is_replaced_and_the_survivor_serves_meanwhile(start_server: StartServer) -> None:
    lab = start_server(*DISPATCH)
    before = _children(lab)
    victim = min(before)
    os.kill(victim, signal.SIGKILL)
    # (A connection handed over in the instant before the parent saw it die would die with it.)
    assert wait_for(lambda: f"(pid {victim}) killed by signal 9, restarting" in lab.log())
    replies = get_many(copies(f"{lab.url}/blocking/sleep?seconds=0.05", 6))
    assert [r.status for r in replies] == [200] * 6
    assert victim not in {r.json()["server"]["pid"] for r in replies}
    assert wait_for(lambda: len(_children(lab)) == 2 and victim not in _children(lab))
    replacement = (_children(lab) - before).pop()

    def replacement_answers() -> bool:
        replies = get_many(copies(f"{lab.url}/blocking/sleep?seconds=0.2", 6))
        return replacement in {r.json()["server"]["pid"] for r in replies}

    assert wait_for(replacement_answers)  # it gets connections once it has started


def test_connections_still_on_their_way_to_a_killed_child_go_to_the_other(start_server: StartServer) -> None:
    lab = start_server(*DISPATCH)

    with ThreadPoolExecutor(6) as pool:
        # Both event loops blocked for 3 s, then four more connections: two wait in each child's channel. Each
        # is sent from here, in this order, whenever the pool's threads get to read the replies.
        long = []
        for i in range(2):  # one after the other: the second finds the first's child busy and goes to the other
            long.append(sent(f"{lab.url}/blocking/sleep?seconds=3&_={i}", pool, timeout=30))
            time.sleep(0.5)
        short = [sent(f"{lab.url}/blocking/sleep?seconds=0.1&_={i}", pool, timeout=30) for i in range(4)]
        time.sleep(0.5)
        os.kill(min(_children(lab)), signal.SIGKILL)
        # Its own run fails; the two it had not taken yet still had their requests unread: served elsewhere.
        # (On a loaded machine both can reach one child before it reports itself busy: then both fail.)
        outcomes = [_outcome(f) for f in long]
        assert None in outcomes and set(outcomes) <= {200, None}, outcomes
        assert [_outcome(f) for f in short] == [200] * 4


def _outcome(reply: Future[Reply]) -> int | None:
    """The status of a request sent (tests/lab_server.py's `sent`), or None if its connection was reset."""
    try:
        return reply.result().status
    except OSError:  # reset: it was in the killed child's hands
        return None


def _answered_then_closed(url: str, target: str) -> tuple[int, bool]:
    """(status, closed): one request with `Connection: close`, read until the server closes it, STALL_S at most."""
    host, port = urlsplit(url).hostname or "", urlsplit(url).port or 80
    data, closed = b"", False
    with socket.create_connection((host, port), timeout=STALL_S) as sock:
        sock.sendall(f"GET {target} HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\n\r\n".encode())
        try:
            while chunk := sock.recv(65536):
                data += chunk
            closed = True
        except TimeoutError:
            pass
    return (int(data.split(b" ", 2)[1]) if data.startswith(b"HTTP/1.") else 0), closed


def test_a_replacement_child_keeps_no_copy_of_the_connections_on_their_way_to_the_others(
    start_server: StartServer,
) -> None:
    # The parent keeps its copy of each connection it sent until the child says it has it. A child forked to
    # replace a killed one inherited those copies of its siblings' connections and never closed them: a
    # connection stayed open after its child had answered and closed it (a client reading to the end waited
    # for ever) and the replacement held its descriptor for good.
    lab = start_server(*DISPATCH)
    with ThreadPoolExecutor(6) as pool:
        held = [sent(f"{lab.url}/blocking/sleep?seconds=4&_={i}", pool, timeout=30) for i in range(2)]
        time.sleep(0.5)  # both event loops blocked: what is sent now stays on its way, unreported
        pings = [pool.submit(_answered_then_closed, lab.url, f"/ping?_={i}") for i in range(4)]
        time.sleep(0.5)
        os.kill(min(_children(lab)), signal.SIGKILL)  # the parent forks its replacement at once
        results = [f.result() for f in pings]
        assert {_outcome(f) for f in held} <= {200, None}  # None: it ran in the killed child
    answered = [closed for status, closed in results if status == 200]
    assert len(answered) >= 2 and all(answered), results


def test_sigterm_to_the_parent_ends_everything(start_server: StartServer) -> None:
    lab = start_server(*DISPATCH)
    assert len(_children(lab)) == 2
    lab.remember_descendants()
    assert lab.terminate() == 0
    assert lab.survivors() == []
