"""Workloads are pure and deterministic: known answers, checked in-process."""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys
import threading
from typing import Any

import numpy as np
import pytest

from lab import ROOT
from workloads import cpu, io, mix, ml, numeric, page
from workloads.registry import WORKLOADS, run_timed

KNOWN = [*cpu.KNOWN_ANSWERS, *numeric.KNOWN_ANSWERS, *ml.KNOWN_ANSWERS, *io.KNOWN_ANSWERS, *mix.KNOWN_ANSWERS,
         *page.KNOWN_ANSWERS]  # fmt: skip


@pytest.mark.parametrize(("name", "params", "expected"), KNOWN, ids=[f"{n}-{p}" for n, p, _ in KNOWN])
def test_known_answer(name: str, params: dict[str, Any], expected: Any) -> None:
    assert WORKLOADS[name].func(**params) == expected
    awaited = WORKLOADS[name].awaited
    if awaited is not None:  # the form an event loop awaits gives the same answer
        assert asyncio.run(awaited(**params)) == expected


def test_every_workload_has_known_answers() -> None:
    assert {name for name, _, _ in KNOWN} == set(WORKLOADS)


def _matmul_by_hand(n: int) -> int:
    # The same matrices as numeric.matmul, multiplied with a pure-Python triple loop.
    rng = np.random.default_rng(0)
    a = rng.integers(0, 10, size=(n, n)).tolist()
    b = rng.integers(0, 10, size=(n, n)).tolist()
    return sum(a[i][k] * b[k][j] for i in range(n) for j in range(n) for k in range(n))


@pytest.mark.parametrize("n", [1, 7, 40])
def test_matmul_known_answers_match_a_pure_python_product(n: int) -> None:
    table = {p["n"]: v for _, p, v in numeric.KNOWN_ANSWERS}
    assert table[n] == _matmul_by_hand(n)


def test_defaults_are_within_their_limits() -> None:
    for workload in WORKLOADS.values():
        for param in workload.params:
            described = param.describe()
            if "min" in described:
                assert described["min"] <= described["default"] <= described["max"]
            else:
                assert described["default"] in described["choices"]


def test_run_timed_reports_where_and_when_it_ran() -> None:
    record = run_timed("count", {"n": 1000})
    assert record["result"] == 1000
    assert record["pid"] == os.getpid()
    assert record["thread"] == threading.current_thread().name
    assert record["started"] <= record["finished"]


def test_predict_model_is_trained_once_per_process() -> None:
    first = ml.predictor()
    ml.predict(10)
    assert ml.predictor() is first


def test_train_is_deterministic() -> None:
    assert ml.train("wine", 20) == ml.train("wine", 20)


def test_the_server_process_trains_its_predict_model_at_start_up(monkeypatch: pytest.MonkeyPatch) -> None:
    # The server process runs /blocking and /threading itself: its first timed
    # predict must not include training, as no pool worker's does.
    from lab.modes.blocking.runner import BlockingRunner

    monkeypatch.setattr(ml, "_model", None)
    monkeypatch.delenv(ml.LAZY_ENV)  # (the suite's labs are lazy: tests/conftest.py)
    asyncio.run(BlockingRunner("blocking").start())
    assert ml._model is not None


def test_a_lazy_server_process_leaves_it_for_the_first_predict(monkeypatch: pytest.MonkeyPatch) -> None:
    from lab.modes.blocking.runner import BlockingRunner

    monkeypatch.setattr(ml, "_model", None)
    monkeypatch.setenv(ml.LAZY_ENV, "1")
    asyncio.run(BlockingRunner("blocking").start())
    assert ml._model is None
    ml.predict(1)
    assert ml._model is not None


def test_the_app_and_the_bench_tools_do_not_load_scikit_learn() -> None:
    # It costs about 2 s of CPU to import: paid where a predict or train runs, not by every process that lists
    # the workloads (a forked server's parent, `python -m bench.size --help`).
    code = "import sys, handlers.app, bench.size, bench.overhead; print('sklearn' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False"


def test_the_param_parser_does_not_load_numpy() -> None:
    # The embedded upstream parses ?seconds= with it; numpy and scikit-learn
    # would add most of a second to every server start.
    code = "import sys, lab.modes.upstream.server; print(sorted({'numpy', 'sklearn'} & set(sys.modules)))"
    out = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"
