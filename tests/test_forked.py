"""--processes N: forked children share the socket, and SIGTERM leaves nothing behind."""

from __future__ import annotations

import signal

import pytest

from tests.conftest import StartServer


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGINT])
def test_two_children_answer_and_all_processes_go_on_signal(start_server: StartServer, sig: int) -> None:
    lab = start_server("--processes", "2", "--process-pool", "1")
    servers, _ = lab.reach_every_child(2)
    assert len(servers) == 2
    assert {task for _, task in servers} == {0, 1}
    assert lab.pid not in {pid for pid, _ in servers}  # the parent only supervises
    started = lab.remember_descendants()
    # 2 children + 1 process-pool worker each + the embedded upstream
    assert len(started) >= 5
    assert lab.terminate(sig) == 0
    assert lab.survivors() == []


def test_single_process_server_leaves_nothing_behind(start_server: StartServer) -> None:
    lab = start_server()
    assert len(lab.remember_descendants()) >= 3  # upstream + process-pool workers
    assert lab.terminate() == 0
    assert lab.survivors() == []
