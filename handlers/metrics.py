"""GET /metrics: the stats board in Prometheus's text format, all forked children included.

A custom collector over lab/instruments/stats.py's shared-memory board, read at scrape
time, so whichever child answers speaks for every server process (the
board's slots), as /stats does. Names follow Prometheus's conventions:

lab_requests_total{mode,status}          requests answered, by HTTP status
lab_request_seconds{mode}                a histogram: arrival to answer
lab_pool_jobs{pool,state}                jobs running / waiting now (a gauge)
lab_pool_outcomes_total{pool,outcome}    jobs submitted, rejected, timed out, cancelled, broken
lab_gil_contention{task_id}              each server process's GIL meter, 0-1 (task_id 0 when not forked)
lab_core_wait{task_id}                   each server process's core meter: run-queue share, 0-1
lab_server_processes                     server processes reporting
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

from prometheus_client import CONTENT_TYPE_LATEST, CollectorRegistry, generate_latest
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, HistogramMetricFamily, Metric
from prometheus_client.registry import Collector

from handlers.base import LabHandler
from lab.instruments.stats import LATENCY_BUCKETS_S, merge

# Pool counters that only ever grow (the snapshot's other numbers are gauges or sizes).
OUTCOMES = ("submitted", "rejected", "timed_out", "cancelled_waiting", "broken", "pool_restarts", "workers_lost")


class BoardCollector(Collector):
    """Every server process's numbers, as Prometheus metric families; `docs` reads the board."""

    def __init__(self, docs: Callable[[], list[dict[str, Any]]]) -> None:
        self.docs = docs

    def collect(self) -> Iterator[Metric]:
        docs = self.docs()
        yield from _requests(docs)
        yield from _pools(docs)
        yield _per_process(docs, "gil_contention", "Each server process's GIL contention lately, 0-1 (gilknocker)")
        yield _per_process(docs, "core_wait", "Each server process's threads' run-queue share lately, 0-1")
        yield GaugeMetricFamily("lab_server_processes", "Server processes reporting on the board", value=len(docs))


def _per_process(docs: list[dict[str, Any]], key: str, about: str) -> Metric:
    """A gauge of one meter, one sample per server process that reads it."""
    gauge = GaugeMetricFamily(f"lab_{key}", about, labels=["task_id"])
    for doc in docs:
        if doc.get(key) is not None:
            gauge.add_metric([str(doc["task_id"] or 0)], doc[key])
    return gauge


def _requests(docs: list[dict[str, Any]]) -> Iterator[Metric]:
    requests = CounterMetricFamily(
        "lab_requests", "Requests answered, by mode and HTTP status", labels=["mode", "status"]
    )
    latency = HistogramMetricFamily(
        "lab_request_seconds", "Seconds from a request's arrival to its answer, by mode", labels=["mode"]
    )
    for mode, entry in sorted(merge([doc["requests"] for doc in docs]).items()):
        for status, count in sorted(entry["statuses"].items()):
            requests.add_metric([mode, status], count)
        cumulative, buckets = 0, []
        for bound, count in zip([*map(str, LATENCY_BUCKETS_S), "+Inf"], entry["buckets"], strict=True):
            cumulative += count
            buckets.append((bound, cumulative))
        latency.add_metric([mode], buckets, sum_value=entry["total_ms"] / 1000)
    yield requests
    yield latency


def _pools(docs: list[dict[str, Any]]) -> Iterator[Metric]:
    """Every pool's numbers, all server processes added together."""
    totals: dict[str, dict[str, float]] = {}
    for doc in docs:
        for pool, snap in doc["pools"].items():
            total = totals.setdefault(pool, {})
            for key in ("running", "waiting", *OUTCOMES):
                if isinstance(snap.get(key), int | float):
                    total[key] = total.get(key, 0) + snap[key]
    jobs = GaugeMetricFamily("lab_pool_jobs", "Pool jobs running or waiting now", labels=["pool", "state"])
    outcomes = CounterMetricFamily("lab_pool_outcomes", "Pool jobs by what became of them", labels=["pool", "outcome"])
    for pool, total in sorted(totals.items()):
        for key, value in total.items():
            if key in ("running", "waiting"):
                jobs.add_metric([pool, key], value)
            else:
                outcomes.add_metric([pool, key], value)
    yield jobs
    yield outcomes


class MetricsHandler(LabHandler):
    """Prometheus text format, every forked server process included."""

    def get(self) -> None:
        services = self.services
        services.publish()  # our own slot, fresh
        registry = CollectorRegistry(auto_describe=False)
        registry.register(BoardCollector(services.board.docs))
        self.set_header("Content-Type", CONTENT_TYPE_LATEST)
        self.finish(generate_latest(registry))


routes = [(r"/metrics", MetricsHandler)]
