"""Strict query-parameter parsing: every rejection names the param and its range."""

from __future__ import annotations

import pytest

from lab.modes.registry import MODES
from lab.runs import KnownRuns, Refused
from workloads.params import ChoiceParam, FloatParam, IntParam, ParamError, parse_params
from workloads.registry import WORKLOADS

N = IntParam("n", 10, 1, 100, "")
SECONDS = FloatParam("seconds", 1.0, 0.0, 30.0, "")
DATASET = ChoiceParam("dataset", "digits", ("digits", "iris"), "")


@pytest.mark.parametrize("raw", ["1", "100", "050"])
def test_integers_in_range_parse(raw: str) -> None:
    assert N.parse(raw) == int(raw)


@pytest.mark.parametrize("raw", ["0", "101", "-1", "1.0", "1e2", " 5", "5 ", "5_0", "٥", "", "0x10", "9" * 40, "+5"])
def test_anything_else_is_rejected_with_the_range(raw: str) -> None:
    with pytest.raises(ParamError, match=r"^n must be an integer between 1 and 100$"):
        N.parse(raw)


@pytest.mark.parametrize(("raw", "value"), [("0", 0.0), ("1.5", 1.5), (".5", 0.5), ("3e1", 30.0), ("2.", 2.0)])
def test_numbers_parse(raw: str, value: float) -> None:
    assert SECONDS.parse(raw) == value


@pytest.mark.parametrize(
    "raw", ["nan", "NaN", "inf", "-inf", "Infinity", "1e400", "30.001", "-0.1", "0x1p3", "1,5", ""]
)
def test_non_finite_or_out_of_range_numbers_are_rejected(raw: str) -> None:
    with pytest.raises(ParamError, match=r"^seconds must be a number between 0 and 30$"):
        SECONDS.parse(raw)


def test_choices() -> None:
    assert DATASET.parse("iris") == "iris"
    with pytest.raises(ParamError, match="dataset must be one of: digits, iris"):
        DATASET.parse("../../etc/passwd")


def test_defaults_fill_missing_params() -> None:
    assert parse_params("w", (N, SECONDS), {"n": ["7"]}) == {"n": 7, "seconds": 1.0}


def test_unknown_params_are_rejected_naming_the_allowed_ones() -> None:
    with pytest.raises(ParamError, match=r"unknown parameter 'N' for w; allowed: n, seconds") as caught:
        parse_params("w", (N, SECONDS), {"N": ["7"]})
    assert caught.value.param == "N"


def test_repeated_params_are_rejected() -> None:
    with pytest.raises(ParamError, match="n given 2 times; give it once"):
        parse_params("w", (N,), {"n": ["1", "2"]})


def test_the_cache_buster_is_ignored() -> None:
    assert parse_params("w", (N,), {"_": ["123", "456"]}) == {"n": 10}


def test_every_registered_workload_parses_its_own_defaults() -> None:
    for workload in WORKLOADS.values():
        query = {p.name: [str(p.default)] for p in workload.params}
        assert workload.parse(query) == {p.name: p.default for p in workload.params}


def test_a_server_keeps_the_runs_it_resolved_and_never_a_refused_one() -> None:
    runs = KnownRuns(size=4)
    blocking = MODES["blocking"]
    first = runs.get(blocking, "count", "n=5", {"n": ["5"]})
    assert (first.mode, first.workload, first.params) == ("blocking", "count", {"n": 5})
    assert runs.get(blocking, "count", "n=5", {"n": ["5"]}) is first  # kept: resolved once
    for bad in ("n=-1", "n=abc"):
        with pytest.raises(Refused) as refused:
            runs.get(blocking, "count", bad, {"n": [bad[2:]]})
        assert refused.value.status == 400
    with pytest.raises(Refused) as refused:
        runs.get(blocking, "nope", "", {})
    assert refused.value.status == 404
    assert len(runs._runs) == 1  # the refusals were not kept
    for n in range(1, 11):  # more runs than it keeps: it starts again, it does not grow
        assert runs.get(blocking, "count", f"n={n}", {"n": [str(n)]}).params == {"n": n}
        assert len(runs._runs) <= 4
