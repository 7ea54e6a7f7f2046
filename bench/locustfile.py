"""Locust users for the lab: `locust -f bench/locustfile.py --host http://127.0.0.1:8000`, headless or its UI.

Each simulated user sends GET requests to a lab route, one after another
(the uWSGI tuning write-up's 15 users), or paced to a constant rate each.
Options, on Locust's own command line (or its UI's form, or LOCUST_LAB_*):

    --lab-path /threading/count?n=20000000   the route; several, comma-separated: a mix, taken in turn
    --lab-requests 300                       stop once this many requests were answered (0: run on)
    --lab-rate 2                             each user at most 2 requests/s (an arrival rate); 0: back to back

`python -m bench.load` runs it headless, samples the server meanwhile and
writes the tables and the chart (make locust opens the UI).
"""

from __future__ import annotations

import itertools
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


@events.init_command_line_parser.add_listener
def _options(parser: Any) -> None:
    parser.add_argument("--lab-path", default=DEFAULT_PATH, help="lab route(s) to GET, comma-separated")
    parser.add_argument("--lab-requests", type=int, default=0, help="stop after this many answers (0: run on)")
    parser.add_argument("--lab-rate", type=float, default=0.0, help="requests/s per user (0: back to back)")


@events.init.add_listener
def _remember(environment: Environment, **kwargs: Any) -> None:
    global _env
    _env = environment


@events.request.add_listener
def _count(**kwargs: Any) -> None:
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
        paths = [path.strip() for path in options.lab_path.split(",") if path.strip()]
        path = paths[number % len(paths)]
        # Named by route, without the query: one row per route in Locust's tables.
        self.client.get(path, name=path.split("?")[0])
