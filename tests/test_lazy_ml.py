"""--lazy-ml: by default every worker loads scikit-learn and trains the predict model before the server is ready;
with the flag (or LAB_LAZY_ML=1, which this suite sets for every lab it starts: tests/conftest.py) each worker
loads it at its first predict or train, and answers it the same."""

from __future__ import annotations

from pathlib import Path

from tests.conftest import StartServer
from tests.lab_server import get, pool_stats
from workloads.ml import KNOWN_ANSWERS, LAZY_ENV

ROWS = 100
ANSWER = next(answer for name, params, answer in KNOWN_ANSWERS if name == "predict" and params == {"rows": ROWS})


def loaded_sklearn(pid: int) -> bool:
    """Whether scikit-learn's compiled modules are mapped into `pid`: imported (nothing unloads them)."""
    return "/sklearn/" in Path(f"/proc/{pid}/maps").read_text()


def test_by_default_the_server_and_its_pool_workers_load_it_before_they_are_ready(start_server: StartServer) -> None:
    lab = start_server("--process-pool", "1", env={LAZY_ENV: "0"})
    (worker,) = pool_stats(lab.url, "processing")["worker_pids"]
    assert get(f"{lab.url}/stats").json()["server"]["lazy_ml"] is False
    assert loaded_sklearn(lab.pid) and loaded_sklearn(worker)


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
