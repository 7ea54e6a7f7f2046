"""/, /ping and /workloads."""

from __future__ import annotations

import importlib.util
import re
import sys

import pytest

from lab.modes.registry import MODES
from tests.inproc import InProcessLab
from tests.lab_server import LabServer, get
from tests.procs import wait_for
from workloads.clocks import gil_enabled
from workloads.registry import WORKLOADS


def test_ping_is_tiny(server: LabServer) -> None:
    reply = get(f"{server.url}/ping")
    body = reply.json()
    assert body == {"pong": True, "pid": server.pid, "gil": body["gil"], "core_wait": body["core_wait"]}
    # This process's GIL contention lately (read every 200 ms; None before the first reading):
    # a share, and low on an idle server: it counts only this process's threads, so busy neighbours do not
    # raise it. A window that still covers the previous test's burst on this shared server may read high, so a
    # later one is waited for (a meter stuck high still fails).
    if gil_enabled() and importlib.util.find_spec("gilknocker"):
        assert wait_for(lambda: get(f"{server.url}/ping").json()["gil"] is not None)
        assert wait_for(lambda: 0 <= get(f"{server.url}/ping").json()["gil"] < 0.5)
    else:  # no GIL to meter (a free-threaded server), or no meter
        assert get(f"{server.url}/ping").json()["gil"] is None
    # Its core meter likewise: the run-queue share of its threads, a share.
    assert wait_for(lambda: get(f"{server.url}/ping").json()["core_wait"] is not None)
    assert 0 <= get(f"{server.url}/ping").json()["core_wait"] <= 1
    assert reply.headers["Cache-Control"] == "no-store"


def test_workloads_lists_params_limits_and_gil(server: LabServer) -> None:
    listed = get(f"{server.url}/workloads").json()
    assert isinstance(listed, list)
    assert [w["name"] for w in listed] == ["count", "fib", "matmul", "train", "predict", "sleep", "mix", "page"]
    for entry in listed:
        assert set(entry) == {"name", "description", "params", "releases_gil", "waits", "needs", "awaitable",
                              "gil_enabled", "modes"}  # fmt: skip
        assert entry["releases_gil"] is WORKLOADS[entry["name"]].releases_gil
        assert entry["gil_enabled"] is gil_enabled()  # the server runs on this interpreter: false on 3.13t
        for param in entry["params"]:
            assert {"name", "type", "default"} <= set(param)
            assert ({"min", "max"} <= set(param)) or "choices" in param
    by_name = {w["name"]: w for w in listed}
    assert by_name["count"]["params"][0] == {
        "name": "n",
        "type": "integer",
        "default": 30_000_000,
        "min": 1,
        "max": 200_000_000,
        "help": "loop iterations",
    }
    assert by_name["count"]["releases_gil"] is False
    assert by_name["matmul"]["releases_gil"] is True


def test_published_maxima_are_enforced(server: LabServer) -> None:
    # The limits /workloads publishes are the ones the server enforces.
    for workload in WORKLOADS.values():
        for param in workload.params:
            described = param.describe()
            if described["type"] == "integer":
                assert get(f"{server.url}/blocking/{workload.name}?{param.name}={described['max'] + 1}").status == 400


def test_a_free_threaded_interpreter_is_named_in_workloads_and_stats(
    app: InProcessLab, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(sys, "_is_gil_enabled", lambda: False, raising=False)  # no such build installs here
    assert {w["gil_enabled"] for w in get(f"{app.url}/workloads").json()} == {False}
    assert get(f"{app.url}/stats").json()["server"]["gil_enabled"] is False


def test_page_links_every_route(server: LabServer) -> None:
    reply = get(f"{server.url}/")
    assert reply.status == 200
    assert reply.headers["Content-Type"].startswith("text/html")
    html = reply.body.decode()
    links = set(re.findall(r'href="(/[a-z]*)', html))
    assert {"/ping", "/workloads", "/modes", "/async", "/stats"} <= links
    assert {f"/{name}" for name, mode in MODES.items() if mode.runs_workloads} <= links  # from the registry
    assert "http://" not in html and "https://" not in html  # self-contained, nothing off-origin


def test_head_ping_answers_like_get_without_a_body(app: InProcessLab) -> None:
    # Health checkers (load balancers, uptime probes) send HEAD.
    got = get(f"{app.url}/ping")
    head = get(f"{app.url}/ping", method="HEAD")
    assert head.status == 200 and head.body == b""
    assert head.headers["Content-Type"] == got.headers["Content-Type"]
    assert head.headers["Content-Length"] == str(len(got.body))
