"""python -m bench.size end to end: a short sweep of a tiny lab route, the peers' WSGI app measured from outside
under gunicorn, bad input refused with exit 2, and nothing it started left running."""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path
from typing import Any

import pytest

from bench.lib.sizing import model
from tests.bench_helpers import Tracked, is_png

pytestmark = pytest.mark.timeout(420)
SHORT = ("--quick", "--seconds", "1")


def _run(
    tmp_path: Path, *flags: str, timeout: float = 400, env: dict[str, str] | None = None
) -> tuple[int, str, str, list[int], Path]:
    out = tmp_path / "size"
    with Tracked([sys.executable, "-m", "bench.size", *flags, "--out", str(out)], env=env) as run:
        stdout, stderr = run.communicate(timeout)
        left = run.survivors()
    return run.process.returncode, stdout, stderr, left, out


def _model_answer(doc: dict[str, Any]) -> str:
    """The point bench.lib.sizing.model recommends for the split, memory and cores size.json recorded."""
    cores = doc["cores"]
    split, memory = model.Split(**doc["split"]), model.Memory(**doc["memory_model"])
    return model.recommend(split, cores["capacity"], memory, None, 2 * cores["usable"] + 1).label


def _check_document(doc: dict[str, Any]) -> None:
    rec = doc["recommendation"]
    assert isinstance(rec["processes"], int) and isinstance(rec["threads"], int)
    assert rec["processes"] >= 1 and rec["threads"] >= 1
    assert set(doc["flags"]) == {"lab", "gunicorn", "uwsgi"}
    assert doc["flags"]["gunicorn"] == f"-k gthread -w {rec['processes']} --threads {rec['threads']}"
    assert set(doc["split"]) >= {"cpu_ms", "gil_ms", "wait_ms", "alone_ms"}
    labels = [point["label"] for point in doc["points"]]
    assert rec["label"] in labels and doc["model_point"] == labels[0]
    for point in doc["points"]:
        assert point["predicted"]["throughput_rps"] > 0 and point["measured"]["closed_rps"] > 0
        assert point["measured"]["memory"]["uss_mb"] > 0
    assert {role for point in doc["points"] for role in point["roles"]} >= {"predicted", "rule: 2 x cores + 1 workers"}
    assert doc["cores"]["usable"] >= 1 and doc["plan"]["rounds"] == 1


def test_a_quick_sweep_of_a_lab_route_answers_in_size_json_md_and_png(tmp_path: Path) -> None:
    code, stdout, stderr, left, out = _run(tmp_path, "--path", "/threading/count?n=20000", *SHORT)
    assert code == 0, stderr[-3000:]
    assert left == []  # no server.py, pool worker or upstream outlives the run
    doc = json.loads((out / "size.json").read_text())
    _check_document(doc)
    # Pure computing: its CPU outweighs its waiting, both measured in this run; the model's point is the model's
    # answer to that split (which point that is moves with the measurement: tests/test_size_model.py).
    assert doc["split"]["cpu_ms"] > doc["split"]["wait_ms"]
    assert doc["model_point"] == _model_answer(doc)
    envelope = doc["measured"]["alone"]["envelope"]
    assert envelope["cpu_ms"] > 0 and envelope["run_ms"] > 0  # the lab's own split, from its envelopes
    assert "Sizing /threading/count" in (out / "size.md").read_text() and is_png(out / "size.png")
    assert "round 1/1" in stderr  # the progress line
    assert stdout.startswith("# Sizing")


def test_a_wsgi_app_is_measured_from_outside_under_gunicorn(tmp_path: Path) -> None:
    code, _, stderr, left, out = _run(tmp_path, "--wsgi", "peers.app:application", "--path",
                                      "/wsgi/sleep?seconds=0.02", *SHORT)  # fmt: skip
    assert code == 0, stderr[-3000:]
    assert left == []  # no gunicorn master or worker outlives the run
    doc = json.loads((out / "size.json").read_text())
    _check_document(doc)
    alone = doc["measured"]["alone"]
    assert alone["envelope"] is None  # nothing read from the app's answers: CPU and run queue from /proc
    assert alone["cpu_ms"] > 0 and alone["run_queue_ms"] >= 0 and alone["memory"]["processes"]
    assert doc["split"]["wait_ms"] > doc["split"]["cpu_ms"]  # a sleep: mostly waiting
    assert doc["model_point"] == _model_answer(doc)  # the model's answer to the wait-heavy split it measured
    assert doc["target"] == {"kind": "wsgi", "name": "peers.app:application /wsgi/sleep?seconds=0.02",
                             "path": "/wsgi/sleep?seconds=0.02", "app": "peers.app:application"}  # fmt: skip


# A WSGI app that starts a thread when it is imported and sizes its BLAS pool itself, beyond the cores (OpenBLAS
# caps what OPENBLAS_NUM_THREADS asks at the cores; its own call does not).
EAGER_APP = """
import os
import threading

import numpy
from threadpoolctl import threadpool_limits

threading.Thread(target=threading.Event().wait, daemon=True).start()
threadpool_limits(int(os.environ["EAGER_APP_BLAS"]))


def application(environ, start_response):
    start_response("200 OK", [("Content-Type", "text/plain")])
    return [b"ok"]
"""


def test_an_app_with_a_pool_before_the_fork_and_blas_threads_over_the_cores_is_warned_of_both(
    tmp_path: Path,
) -> None:
    (tmp_path / "eager_app.py").write_text(EAGER_APP)
    blas = 8 * (os.cpu_count() or 1)  # more than any point's processes share the cores for
    env = {**os.environ, "EAGER_APP_BLAS": str(blas)}
    code, _, stderr, left, out = _run(tmp_path, "--wsgi", "eager_app:application", "--app-dir", str(tmp_path),
                                      "--path", "/", *SHORT, env=env)  # fmt: skip
    assert code == 0, stderr[-3000:]
    assert left == []
    doc = json.loads((out / "size.json").read_text())
    processes = doc["recommendation"]["processes"]
    warnings = doc["warnings"]
    assert any(f"runs {blas} threads in each process: x {processes} processes" in w for w in warnings), warnings
    assert any("the app starts 1 thread(s) and 0 process(es) when it is imported" in w for w in warnings), warnings
    assert "pool created before a fork" in (out / "size.md").read_text()


@pytest.mark.parametrize(
    ("flags", "says"),
    [
        (("--path", "/threading/nosuch"), "unknown workload"),
        (("--path", "/threading/count?n=0"), "n must be"),
        (("--path", "/processing/count"), "/threading/"),
        (("--path", "/nowhere"), "not a lab route"),
        (("--path", "/threading/count", "--server-args", "--nope 3"), "server.py has no --nope"),
        (("--path", "/threading/count", "--server-args", "--thread-pool 3"), "set for each point"),
        (("--wsgi", "peers.app", "--path", "/wsgi"), "module:callable"),
        (("--wsgi", "nosuchmodule_size:app", "--path", "/x"), "does not import"),
        (("--wsgi", "peers.app:nosuch", "--path", "/x"), "does not import"),
        (("--wsgi", "peers.app:application", "--path", "/nowhere"), "answered 404"),
    ],
)
def test_bad_input_exits_2_with_one_line_and_leaves_nothing(tmp_path: Path, flags: tuple[str, ...], says: str) -> None:
    code, _, stderr, left, out = _run(tmp_path, *flags, "--quick", timeout=200)
    lines = [line for line in stderr.splitlines() if line.startswith("error:")]
    assert code == 2 and len(lines) == 1 and says in lines[0], stderr[-2000:]
    assert "Traceback" not in stderr and left == []
    assert not (out / "size.json").exists()
