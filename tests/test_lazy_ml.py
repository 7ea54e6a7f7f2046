"""--lazy-ml: by default every worker loads scikit-learn and trains the predict model before the server is ready;
with the flag (or LAB_LAZY_ML=1, which this suite sets for every lab it starts: tests/conftest.py) each worker
loads it at its first predict or train, and answers it the same."""

from __future__ import annotations

import socket
import threading
from pathlib import Path

import pytest

from bench.lib.servers import LocalServer, _say_lazy, lab_server, say_if_lazy
from tests.conftest import StartServer
from tests.lab_server import get, pool_stats
from workloads.ml import KNOWN_ANSWERS, LAZY_ENV

ROWS = 100
ANSWER = next(answer for name, params, answer in KNOWN_ANSWERS if name == "predict" and params == {"rows": ROWS})


def loaded_sklearn(pid: int) -> bool:
    """Whether scikit-learn's compiled modules are mapped into `pid`: imported (nothing unloads them)."""
    return "/sklearn/" in Path(f"/proc/{pid}/maps").read_text()


def test_by_default_every_process_loads_it_before_it_is_ready(start_server: StartServer) -> None:
    # Forked: the parent imports it once for both children (each then trains its own model).
    lab = start_server("--processes", "2", "--process-pool", "1", env={LAZY_ENV: "0"})
    stats = get(f"{lab.url}/stats").json()
    assert stats["server"]["lazy_ml"] is False
    children = [int(process["pid"]) for process in stats["processes"]]
    workers = [pid for process in stats["processes"] for pid in process["pools"]["processing"]["worker_pids"]]
    assert len(children) == len(workers) == 2
    assert all(loaded_sklearn(pid) for pid in [lab.pid, *children, *workers])


def test_with_lazy_ml_each_worker_loads_it_at_its_first_predict(start_server: StartServer) -> None:
    lab = start_server("--process-pool", "1", "--lazy-ml", env={LAZY_ENV: "0"})  # the flag, not the environment
    (worker,) = pool_stats(lab.url, "processing")["worker_pids"]
    assert get(f"{lab.url}/stats").json()["server"]["lazy_ml"] is True
    assert "scikit-learn at each worker's first predict or train (--lazy-ml)" in lab.log()
    assert not loaded_sklearn(lab.pid) and not loaded_sklearn(worker)
    body = get(f"{lab.url}/processing/predict?rows={ROWS}").json()
    assert (body["result"], body["worker"]["pid"]) == (ANSWER, worker)
    assert loaded_sklearn(worker) and not loaded_sklearn(lab.pid)
    assert get(f"{lab.url}/blocking/predict?rows={ROWS}").json()["result"] == ANSWER
    assert loaded_sklearn(lab.pid)


def test_a_bench_tool_says_when_the_labs_it_starts_are_lazy(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    _say_lazy.cache_clear()  # (once a run: another test of this worker may have said it)
    with LocalServer(["--process-pool", "1"], tmp_path / "lab.log", quiet=True):  # (bench.race --jsonl's own lab)
        pass
    assert capsys.readouterr().err == ""
    with LocalServer(["--process-pool", "1"], tmp_path / "lab.log"):  # lazy: tests/conftest.py
        pass
    assert f"lazy about scikit-learn ({LAZY_ENV}=1 or --lazy-ml)" in capsys.readouterr().err


def test_a_bench_tool_says_when_the_lab_at_its_url_is_lazy_and_only_then(
    start_server: StartServer, capsys: pytest.CaptureFixture[str]
) -> None:
    eager = start_server("--process-pool", "1", env={LAZY_ENV: "0"})
    lazy = start_server("--process-pool", "1", "--lazy-ml")
    _say_lazy.cache_clear()
    for lab in (eager, lazy):
        with lab_server(lab.url, "", "unused-") as base:
            assert base == lab.url
    said = capsys.readouterr().err
    assert f"the lab at {lazy.url} is lazy about scikit-learn" in said
    assert eager.url not in said


@pytest.mark.parametrize(
    "reply",
    [b"garbage\r\n\r\n", b"HTTP/1.1 200 OK\r\nContent-Length: 99\r\n\r\n{}", b'HTTP/1.1 200 OK\r\n\r\n{"server": "x"}'],
    ids=["bad status line", "short body", "server not an object"],
)
def test_a_url_whose_stats_make_no_sense_gets_no_note_and_stops_no_tool(
    reply: bytes, capsys: pytest.CaptureFixture[str]
) -> None:
    # Whatever answers at --url, the note's question never stops the tool: its own requests say what is wrong.
    with socket.create_server(("127.0.0.1", 0)) as listener:

        def answer() -> None:
            connection, _ = listener.accept()
            with connection:
                connection.recv(4096)
                connection.sendall(reply)

        thread = threading.Thread(target=answer)
        thread.start()
        _say_lazy.cache_clear()
        say_if_lazy(f"http://127.0.0.1:{listener.getsockname()[1]}")
        thread.join(10)
    assert capsys.readouterr().err == ""
