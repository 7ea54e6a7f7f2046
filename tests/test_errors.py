"""Every error is the JSON error shape with the right status, and the server keeps serving."""

from __future__ import annotations

import json

import orjson
import pytest

from lab.web.json_handler import to_json
from tests.conftest import StartServer
from tests.envelopes import assert_error
from tests.inproc import InProcessLab
from tests.lab_server import get


@pytest.mark.parametrize(
    ("path", "status", "fragment"),
    [
        ("/blocking?n=abc", 400, "n must be an integer between 1 and 200000000"),
        ("/threading?n=0", 400, "n must be an integer between 1 and 200000000"),
        ("/processing/fib?n=39", 400, "n must be an integer between 1 and 38"),
        ("/processing/matmul?repeat=1.5", 400, "repeat must be an integer between 1 and 50"),
        ("/threading/train?dataset=mnist", 400, "dataset must be one of: digits, iris, wine, breast_cancer"),
        ("/blocking/sleep?seconds=nan", 400, "seconds must be a number between 0 and 30"),
        ("/blocking/sleep?seconds=1e999", 400, "seconds must be a number between 0 and 30"),
        ("/blocking?n=1&n=2", 400, "n given 2 times"),
        ("/blocking?N=5", 400, "unknown parameter 'N' for count; allowed: n"),
        ("/blocking/count?n=%FF", 400, "not valid UTF-8"),
        ("/blocking?" + "a" * 3000, 400, "query string too long"),
        ("/processing/nope", 404, "workloads: count, fib, matmul, train, predict, sleep, mix"),
        ("/blocking/..%2F..%2Fetc%2Fpasswd", 404, "unknown workload"),
        ("/nope", 404, "no route for '/nope'"),
        ("/blocking/count/extra", 404, "no route"),
    ],
)
def test_bad_requests_get_json_errors(app: InProcessLab, path: str, status: int, fragment: str) -> None:
    assert_error(get(app.url + path), status, fragment)


@pytest.mark.parametrize("method", ["POST", "PUT", "DELETE", "PATCH"])
def test_wrong_methods_are_405(app: InProcessLab, method: str) -> None:
    assert_error(get(f"{app.url}/processing", method=method), 405)


def test_debug_puts_the_traceback_in_error_bodies(start_server: StartServer) -> None:
    lab = start_server("--debug", "--process-pool", "1")
    body = get(f"{lab.url}/blocking?n=abc").json()["error"]
    assert body["status"] == 400
    assert any("LabError" in line for line in body["traceback"])


def test_every_json_answer_is_written_by_one_encoder_that_takes_what_orjson_refuses() -> None:
    # orjson writes the answers; what it refuses (an int past 64 bits, a key that is not a string) the standard
    # library writes, so that no answer a workload can give becomes a 500.
    body = {"result": 2**70, "params": {"n": 1}, "timing": {"received": 1795796601.1295285, "run_ms": 0.015}}
    assert json.loads(to_json(body)) == body
    assert json.loads(to_json({1: "a"})) == {"1": "a"}
    assert json.loads(to_json({"t": 1795796601.1295285, "s": "</script> é"})) == {
        "t": 1795796601.1295285,
        "s": "</script> é",
    }


@pytest.mark.parametrize("path", ["/blocking/count?n=1", "/nope", "/workloads"])
def test_answers_envelopes_errors_and_lists_alike_are_written_by_that_encoder(app: InProcessLab, path: str) -> None:
    # orjson writes without spaces ({"mode":"blocking",...}); Tornado's json_encode and json.dumps with them.
    body = get(app.url + path).body
    assert body == orjson.dumps(json.loads(body))
