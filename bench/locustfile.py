"""Locust users for the lab: `locust -f bench/locustfile.py --host http://127.0.0.1:8000`, headless or its UI.

Each simulated user sends GET requests to a lab route, one after another
(the uWSGI tuning write-up's 15 users), or paced to a constant rate each,
or takes its turn in one arrival rate shared by all: the k-th request is due
k/R seconds after the first, whoever sends it, so requests arrive at R/s
whether or not the server keeps up, as long as a user is free (users are
the most requests in flight at once: give enough for the queue to grow).
Options, on Locust's own command line (or its UI's form, or LOCUST_LAB_PATH etc.):

    --lab-path /threading/count?n=20000000   the route; several, comma-separated: a mix, taken in turn
    --lab-requests 300                       stop once this many requests were answered (0: run on)
    --lab-rate 2                             each user at most 2 requests/s (constant_throughput); 0: back to back
    --lab-arrivals 20                        20 requests/s from all users together, evenly spaced: the open model
    --lab-log answers.csv                    every answer, a line each: when it was sent (s), ms, HTTP status

`python -m bench.load` runs it headless, samples the server meanwhile and
writes the tables and the chart (make locust opens the UI).
"""

from __future__ import annotations

import csv
import itertools
import time
from typing import Any

import gevent
from locust import FastHttpUser, constant_throughput, events, task
from locust.env import Environment
from locust.exception import StopUser

DEFAULT_PATH = "/threading/count?n=20000000"
CSV_FLUSH_S = 1.5  # locust.stats.CSV_STATS_INTERVAL_SEC is 1: its CSVs then hold the last answers
_env: Environment | None = None
_sent = itertools.count(1)
_answered = itertools.count(1)
_log: list[tuple[float, float, int]] = []  # --lab-log: (sent, epoch seconds; response time ms; status)
_first_due: list[float] = []  # --lab-arrivals: when the first request was due (monotonic seconds)


@events.init_command_line_parser.add_listener
def _options(parser: Any) -> None:
    # configargparse: each also from its LOCUST_LAB_* variable, as Locust's own options from LOCUST_*.
    for flag, kind, default, words in (
        ("--lab-path", str, DEFAULT_PATH, "lab route(s) to GET, comma-separated"),
        ("--lab-requests", int, 0, "stop after this many answers (0: run on)"),
        ("--lab-rate", float, 0.0, "requests/s per user (0: back to back)"),
        ("--lab-arrivals", float, 0.0, "requests/s from all users together"),
        ("--lab-log", str, "", "CSV of every answer: sent_s, ms, status"),
    ):
        variable = "LOCUST_" + flag.removeprefix("--").replace("-", "_").upper()
        parser.add_argument(flag, type=kind, default=default, env_var=variable, help=f"{words} (${variable})")


@events.init.add_listener
def _remember(environment: Environment, **kwargs: Any) -> None:
    global _env
    _env = environment


@events.quitting.add_listener
def _write_log(environment: Environment, **kwargs: Any) -> None:
    name = environment.parsed_options.lab_log if environment.parsed_options else ""
    if name:
        with open(name, "w", newline="") as file:
            csv.writer(file).writerows([("sent_s", "ms", "status"), *_log])


@events.request.add_listener
def _count(**kwargs: Any) -> None:
    response = kwargs.get("response")
    # FastHttpUser's answer carries its status; 0 where none came (refused, reset, timed out).
    _log.append((round(kwargs.get("start_time") or 0.0, 4), round(kwargs.get("response_time") or 0.0, 1),
                 int(getattr(response, "status_code", 0) or 0)))  # fmt: skip
    limit = _env.parsed_options.lab_requests if _env is not None and _env.parsed_options else 0
    if limit and next(_answered) == limit and _env is not None and _env.runner is not None:
        # Not from inside the request's own greenlet; and the users first, then, once Locust has written
        # its CSVs again (every second), the run.
        gevent.spawn(_env.runner.stop)
        gevent.spawn_later(CSV_FLUSH_S, _env.runner.quit)


class LabUser(FastHttpUser):  # geventhttpclient: about 4x the requests per second of HttpUser per process
    def wait_time(self) -> float:
        rate = self.environment.parsed_options.lab_rate
        return float(constant_throughput(rate)(self)) if rate > 0 else 0.0

    @task
    def hit(self) -> None:
        options = self.environment.parsed_options
        number = next(_sent)
        if options.lab_requests and number > options.lab_requests:
            raise StopUser  # enough are on their way
        if options.lab_arrivals > 0:
            _wait_for_turn(number, options.lab_arrivals)
        paths = [path.strip() for path in options.lab_path.split(",") if path.strip()]
        path = paths[number % len(paths)]
        # Named by route, without the query: one row per route in Locust's tables.
        self.client.get(path, name=path.split("?")[0])


def _wait_for_turn(number: int, rate: float) -> None:
    """Sleep until request `number` is due: (number - 1) / rate seconds after the first."""
    if not _first_due:
        _first_due.append(time.monotonic())
    gevent.sleep(max(0.0, _first_due[0] + (number - 1) / rate - time.monotonic()))
