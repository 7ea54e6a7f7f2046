"""bench/lib/floor_fork.py: the floor forked, its children accepting or handed each connection by a bare parent."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import psutil
import pytest

from bench.lib.servers import floor_server
from lab import ROOT
from tests.lab_server import get
from tests.procs import wait_for


def _held_by(pids: list[int], port: int, status: str = "ESTABLISHED") -> dict[int, int]:
    """How many sockets on local `port` in `status` each process holds."""
    held = {}
    for pid in pids:
        connections = psutil.Process(pid).net_connections(kind="tcp")
        held[pid] = sum(1 for c in connections if c.laddr and c.laddr.port == port and c.status == status)
    return held


def _open(port: int, count: int) -> Iterator[socket.socket]:
    """`count` connections, each answered once (so its server holds it, whoever accepted it)."""
    for _ in range(count):
        client = socket.create_connection(("127.0.0.1", port), timeout=10)
        client.sendall(b"GET /ping HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n")
        assert client.recv(4096).startswith(b"HTTP/1.1 200")
        yield client


def _ended(pid: int) -> bool:
    try:
        return psutil.Process(pid).status() == psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return True


@pytest.mark.parametrize("policy", ["all", "dispatch"])
def test_the_forked_floor_serves_from_its_children_and_stops_them(tmp_path: Path, policy: str) -> None:
    flags = ["--thread-pool", "1", "--processes", "2", "--accept", policy]
    with floor_server(tmp_path, flags, f"floor-{policy}") as (url, pid):
        port = int(url.rsplit(":", 1)[1])
        children = [child.pid for child in psutil.Process(pid).children()]
        assert len(children) == 2
        # Who can accept: every child (all), or the parent alone (dispatch).
        listening = _held_by([pid, *children], port, "LISTEN")
        assert listening == ({pid: 1, **dict.fromkeys(children, 1)} if policy == "all"
                             else {pid: 1, **dict.fromkeys(children, 0)})  # fmt: skip
        assert get(url + "/ping").status == 200
        clients = list(_open(port, 6))
        try:
            # The parent closes its copy of a connection after handing it over, which the child may answer first.
            wait_for(lambda: _held_by([pid], port)[pid] == 0)
            held = _held_by([pid, *children], port)
        finally:
            for client in clients:
                client.close()
        # The parent keeps no connection: with dispatch it accepted all six and closed its copy of each.
        assert held[pid] == 0
        assert sum(held[child] for child in children) == 6
        if policy == "dispatch":
            assert [held[child] for child in children] == [3, 3]  # handed out in turn
        # Its own stop, before the bench's group kill: the parent stops and reaps both children.
        os.kill(pid, signal.SIGTERM)
        assert wait_for(lambda: _ended(pid), timeout=20)
        assert not any(psutil.pid_exists(child) for child in children)


@pytest.mark.parametrize("policy", ["all", "dispatch"])
def test_children_whose_parent_was_killed_stop(tmp_path: Path, policy: str) -> None:
    flags = ["--thread-pool", "1", "--processes", "2", "--accept", policy]
    with floor_server(tmp_path, flags, f"floor-{policy}") as (_url, pid):
        children = [child.pid for child in psutil.Process(pid).children()]
        os.kill(pid, signal.SIGKILL)  # nothing of its own runs: the children must notice
        assert wait_for(lambda: all(_ended(child) for child in children), timeout=20)


FAILING_CHILD = """
import socket
from bench.lib.floor_fork import serve_forked
listener = socket.create_server(("127.0.0.1", 0))
def child(sockets, channel, ready):
    raise ValueError("no pools here")
serve_forked([listener], 2, "dispatch", child, "http://127.0.0.1:0")
"""


def test_a_child_that_fails_says_why_and_the_parent_gives_up() -> None:
    done = subprocess.run([sys.executable, "-c", FAILING_CHILD], cwd=ROOT, capture_output=True, text=True,
                          timeout=60, check=False)  # fmt: skip
    assert done.returncode == 1
    assert done.stderr.count("ValueError: no pools here") == 2
    assert "a forked floor child ended before it served (0 of 2 did)" in done.stderr
    assert "serving on" not in done.stdout


def test_a_dispatching_parent_whose_child_died_sends_to_the_others(tmp_path: Path) -> None:
    flags = ["--thread-pool", "1", "--processes", "2", "--accept", "dispatch"]
    with floor_server(tmp_path, flags, "floor-dispatch") as (url, pid):
        first, second = sorted(child.pid for child in psutil.Process(pid).children())  # the first forked first
        os.kill(first, signal.SIGKILL)
        # Gone, reaped by its parent: a zombie's other threads may still hold its channel open, and a connection
        # sent down it then is lost (this bare parent keeps no copy to send elsewhere, the lab's does).
        assert wait_for(lambda: not psutil.pid_exists(first), timeout=20)
        assert [get(url + "/ping", timeout=10).status for _ in range(4)] == [200] * 4
        assert psutil.Process(pid).status() != psutil.STATUS_ZOMBIE and psutil.pid_exists(second)
