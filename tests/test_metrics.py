"""GET /metrics: Prometheus's text format, parsed as Prometheus would, every forked child counted."""

from __future__ import annotations

from prometheus_client.metrics_core import Metric
from prometheus_client.parser import text_string_to_metric_families

from tests.conftest import StartServer
from tests.inproc import InProcessLab
from tests.lab_server import copies, get, get_many
from tests.procs import wait_for


def scrape(url: str) -> dict[str, Metric]:
    reply = get(f"{url}/metrics")
    assert reply.status == 200 and reply.headers["Content-Type"].startswith("text/plain; version=")
    return {family.name: family for family in text_string_to_metric_families(reply.body.decode())}


def values(family: Metric, sample: str, *labels: str) -> dict[tuple[str, ...], float]:
    return {tuple(s.labels[k] for k in labels): s.value for s in family.samples if s.name == sample}


def test_every_forked_childs_requests_are_counted_by_whichever_answers(start_server: StartServer) -> None:
    lab = start_server("--processes", "2", "--process-pool", "1")
    servers, blocking = lab.reach_every_child(2)  # both children have answered some
    assert len(servers) == 2
    assert all(r.status == 200 for r in get_many(copies(f"{lab.url}/processing/fib?n=10", 3)))
    assert get(f"{lab.url}/processing/fib?n=0").status == 400

    def counted() -> dict[tuple[str, ...], float]:
        return values(scrape(lab.url)["lab_requests"], "lab_requests_total", "mode", "status")

    expected = {("blocking", "200"): blocking, ("processing", "200"): 3, ("processing", "400"): 1}
    assert wait_for(lambda: counted() == expected), counted()
    families = scrape(lab.url)
    latency = families["lab_request_seconds"]
    buckets = values(latency, "lab_request_seconds_bucket", "mode", "le")
    assert buckets[("blocking", "+Inf")] == values(latency, "lab_request_seconds_count", "mode")[("blocking",)]
    ordered = sorted(buckets.items(), key=lambda item: float(item[0][1]))
    blocking_buckets = [count for (mode, _), count in ordered if mode == "blocking"]
    assert blocking_buckets == sorted(blocking_buckets)  # cumulative
    assert values(latency, "lab_request_seconds_sum", "mode")[("blocking",)] >= 0.2 * blocking  # 0.2 s sleeps
    outcomes = values(families["lab_pool_outcomes"], "lab_pool_outcomes_total", "pool", "outcome")
    assert outcomes[("processing", "submitted")] == 4 - 1  # the 400 never reached the pool
    jobs = values(families["lab_pool_jobs"], "lab_pool_jobs", "pool", "state")
    assert jobs[("processing", "running")] == 0 and jobs[("threading", "waiting")] == 0
    assert values(families["lab_server_processes"], "lab_server_processes") == {(): 2}
    # Each child's own GIL meter, named by its task id.
    gil = lambda: set(values(scrape(lab.url)["lab_gil_contention"], "lab_gil_contention", "task_id"))  # noqa: E731
    assert wait_for(lambda: gil() == {("0",), ("1",)}), gil()


def test_metrics_is_not_counted_as_a_request(app: InProcessLab) -> None:
    before = scrape(app.url)
    after = scrape(app.url)
    assert values(after["lab_requests"], "lab_requests_total", "mode", "status") == values(
        before["lab_requests"], "lab_requests_total", "mode", "status"
    )
