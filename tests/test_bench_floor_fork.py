"""bench/lib/floor_fork.py: the floor forked, its children accepting or handed each connection by a bare parent."""

from __future__ import annotations

import socket
from collections.abc import Iterator
from pathlib import Path

import psutil
import pytest

from bench.lib.servers import floor_server
from tests.lab_server import get


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


@pytest.mark.parametrize("policy", ["all", "dispatch"])
def test_the_forked_floor_serves_from_its_children_and_stops_with_them(tmp_path: Path, policy: str) -> None:
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
            held = _held_by([pid, *children], port)
        finally:
            for client in clients:
                client.close()
        # The parent keeps no connection: with dispatch it accepted all six and closed its copy of each.
        assert held[pid] == 0
        assert sum(held[child] for child in children) == 6
        if policy == "dispatch":
            assert [held[child] for child in children] == [3, 3]  # handed out in turn
    assert not any(psutil.pid_exists(p) and psutil.Process(p).status() != psutil.STATUS_ZOMBIE
                   for p in [pid, *children])  # fmt: skip
