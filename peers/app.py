"""The lab's workloads as a plain WSGI app, for the servers people choose between: uWSGI and gunicorn.

The same `workloads` package, the same params and limits, resolved and
answered with the same envelope as the lab (lab/runs.py, which loads no
Tornado: neither does this app), so one client can race both and read both
alike. A WSGI app cannot hand work anywhere: each request runs in
the worker (process, thread or greenlet) the server gave it. How many run at
once is the server's configuration (peers/*.ini, peers/gunicorn-*.py):

GET /ping                         {"pong": true, "pid": ...}
GET /workloads                    the lab's list
GET /wsgi[/{workload}]?params     run a workload here ("mode": "wsgi")
GET /wsgi/upstream?delay=S        wait for the lab's upstream (URL in LAB_UPSTREAM), with a
                                  blocking HTTP call: under gevent (uWSGI --gevent) it yields
GET /wsgi/page?rows=&db_ms=       the page workload, on the database in LAB_DATABASE (sqlite:///PATH
                                  or postgresql://...; each worker opens its own connections)
"""

from __future__ import annotations

import json
import os
import sys
import time
import urllib.error
from collections.abc import Callable, Iterable
from typing import Any
from urllib.parse import parse_qs

from lab import loopback
from lab.modes.upstream import ASYNC_PARAMS
from lab.runs import Own, Refused, envelope, resolve
from workloads.page import database
from workloads.page.errors import Unavailable
from workloads.params import FloatParam
from workloads.registry import DEFAULT_WORKLOAD, described, run_timed, warm_up
from workloads.timing import waited

MODE = "wsgi"
# The upstream call takes the lab's delay param (fanout is the lab's /async business).
UPSTREAM_PARAMS = (FloatParam("delay", 1.0, 0.0, 30.0, ASYNC_PARAMS[0].help),)
UPSTREAM = Own("upstream", UPSTREAM_PARAMS, "upstream")
UPSTREAM_TIMEOUT_S = 15.0

StartResponse = Callable[[str, list[tuple[str, str]]], Any]
REASONS = {200: "OK", 400: "Bad Request", 404: "Not Found", 405: "Method Not Allowed", 502: "Bad Gateway",
           503: "Service Unavailable"}  # fmt: skip
# What a page whose database is unavailable answers, as the lab does: 503, retry after this many seconds.
RETRY_AFTER_S = 2


def worker_id() -> int | None:
    """uWSGI's worker number (1, 2, ...), as the lab's task_id; None under another server."""
    uwsgi = sys.modules.get("uwsgi")  # only importable inside uWSGI
    return int(uwsgi.worker_id()) if uwsgi is not None else None


def _json(start_response: StartResponse, status: int, body: Any, extra: Iterable[tuple[str, str]] = ()) -> list[bytes]:
    data = json.dumps(body).encode()
    headers = [("Content-Type", "application/json; charset=UTF-8"), ("Content-Length", str(len(data))), *extra]
    start_response(f"{status} {REASONS.get(status, 'Error')}", headers)
    return [data]


def _query(environ: dict[str, Any]) -> dict[str, list[str]]:
    try:
        return parse_qs(environ.get("QUERY_STRING", ""), keep_blank_values=True, errors="strict")
    except UnicodeDecodeError:
        raise Refused(400, "query string is not valid UTF-8") from None


def _upstream(delay: float) -> dict[str, Any]:
    base = os.environ.get("LAB_UPSTREAM")
    if not base:
        raise Refused(502, "no upstream: start this app with LAB_UPSTREAM=http://host:port")
    try:
        with loopback.urlopen(f"{base}/delay?seconds={delay!r}", timeout=delay + UPSTREAM_TIMEOUT_S) as reply:
            answer: dict[str, Any] = json.loads(reply.read())
            return answer
    except (OSError, ValueError, urllib.error.HTTPError) as error:
        raise Refused(502, f"upstream {base} failed: {error}") from None


def run(received: float, name: str, query: dict[str, list[str]]) -> dict[str, Any]:
    """One request's work, right here in the worker it arrived at; the lab's envelope."""
    resolved = resolve(MODE, name, query, runs=UPSTREAM if name == UPSTREAM.workload else None)
    if resolved.workload == UPSTREAM.workload:
        started = time.time()
        record = waited(_upstream(resolved.params["delay"]), started)  # as the lab's /async: the call only waited
    else:
        record = run_timed(resolved.workload, resolved.params)
    return envelope(resolved, record, received=received, pid=os.getpid(), task_id=worker_id())


def _error(start_response: StartResponse, status: int, message: str) -> list[bytes]:
    return _json(start_response, status, {"error": {"status": status, "message": message}})


def application(environ: dict[str, Any], start_response: StartResponse) -> Iterable[bytes]:
    received = time.time()
    path = environ.get("PATH_INFO", "/").rstrip("/") or "/"
    try:
        if environ.get("REQUEST_METHOD", "GET") not in ("GET", "HEAD"):
            raise Refused(405, "only GET is served here")
        if path == "/ping":
            return _json(start_response, 200, {"pong": True, "pid": os.getpid()})
        if path == "/workloads":
            return _json(start_response, 200, described())
        parts = path.strip("/").split("/")
        if parts[0] != MODE or len(parts) > 2:
            raise Refused(404, f"no route for {path[:200]!r}; try /ping, /workloads, /{MODE}/{{workload}}")
        name = parts[1] if len(parts) == 2 else DEFAULT_WORKLOAD
        return _json(start_response, 200, run(received, name, _query(environ)))
    except Refused as error:
        return _error(start_response, error.status, error.message)
    except Unavailable as gone:
        body = {"error": {"status": 503, "message": str(gone)}}
        return _json(start_response, 503, body, [("Retry-After", str(RETRY_AFTER_S))])


# Like the lab's pool workers: imports and the predict model paid before anything is timed
# (uWSGI and gunicorn import this module in each worker, or once before forking them).
warm_up()
if os.environ.get("LAB_DATABASE"):  # (a process that set one already keeps it: the tests, for one)
    database.use(os.environ["LAB_DATABASE"])
