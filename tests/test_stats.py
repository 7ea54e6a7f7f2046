"""/stats: exact counters per mode, per process, aggregated across forked children."""

from __future__ import annotations

import time
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from tests.conftest import StartServer
from tests.lab_server import copies, get, sent
from tests.procs import wait_for


def _known_sequence(url: str) -> None:
    for _ in range(3):
        assert get(f"{url}/blocking?n=10").status == 200
    for _ in range(2):
        assert get(f"{url}/processing/fib?n=5").status == 200
    assert get(f"{url}/threading?n=abc").status == 400
    assert get(f"{url}/async?delay=0").status == 200
    assert get(f"{url}/ping").status == 200  # not a mode: not counted
    assert get(f"{url}/nope").status == 404  # not a mode: not counted


EXPECTED = {"blocking": (3, 0), "processing": (2, 0), "threading": (1, 1), "async": (1, 0)}


def _counts(requests: dict[str, dict[str, float]]) -> dict[str, tuple[int, int]]:
    return {mode: (int(r["count"]), int(r["errors"])) for mode, r in requests.items()}


def test_counters_after_a_known_sequence(start_server: StartServer) -> None:
    lab = start_server("--process-pool", "2")
    _known_sequence(lab.url)
    stats = get(f"{lab.url}/stats").json()
    assert _counts(stats["totals"]["requests"]) == EXPECTED
    # The access log has each request once, /ping (the race's probe) never; its good lines come a batch at a
    # time (lab/logs.py).
    assert wait_for(lambda: lab.log().count("INFO tornado.access: 200 GET /blocking?n=10 ") == 3), lab.log()[-2000:]
    assert "GET /ping" not in lab.log()
    [process] = stats["processes"]
    assert process["pid"] == lab.pid and process["task_id"] is None and process["restarts"] == 0
    assert process["alive"] and process["rss_bytes"] > 0 and process["cpu_s"] >= 0
    assert _counts(process["requests"]) == EXPECTED
    for mode in EXPECTED:
        assert 0 <= process["requests"][mode]["mean_ms"] <= process["requests"][mode]["max_ms"]
    pool = process["pools"]["processing"]
    assert pool["size"] == 2 and pool["submitted"] == 2 and pool["running"] == 0 and pool["waiting"] == 0
    assert len(pool["workers"]) == 2
    assert all(w["alive"] and w["rss_bytes"] > 0 and not w["busy"] for w in pool["workers"])
    assert stats["server"]["process_pool"] == 2 and stats["server"]["forked"] is False


def test_busy_workers_and_waiting_jobs_are_visible(start_server: StartServer) -> None:
    lab = start_server("--process-pool", "1", "--thread-pool", "1")
    with ThreadPoolExecutor(4) as pool:
        jobs = [pool.submit(get, u) for u in copies(f"{lab.url}/processing/sleep?seconds=3", 2)]
        jobs += [pool.submit(get, u) for u in copies(f"{lab.url}/threading/sleep?seconds=3", 2)]

        def all_four_in() -> dict[str, Any] | None:
            pools: dict[str, Any] = get(f"{lab.url}/stats").json()["processes"][0]["pools"]
            arrived = sum(pools[m]["running"] + pools[m]["waiting"] for m in ("processing", "threading"))
            # A worker process says it started a job a moment after the pool took it: wait for both to show.
            started = all(pools[m]["busy_workers"] for m in ("processing", "threading"))
            return pools if arrived == 4 and started else None

        assert wait_for(all_four_in)
        pools = all_four_in()
        assert pools is not None
        assert all(j.result().status == 200 for j in jobs)
    assert (pools["processing"]["running"], pools["processing"]["waiting"]) == (1, 1)
    assert (pools["threading"]["running"], pools["threading"]["waiting"]) == (1, 1)
    [worker] = pools["processing"]["workers"]
    assert worker["busy"] is True
    assert pools["processing"]["busy_workers"] == [worker["pid"]]
    assert pools["threading"]["busy_workers"] == ["lab-thread_0"]


def test_any_forked_child_reports_all_children(start_server: StartServer) -> None:
    lab = start_server("--processes", "2", "--process-pool", "1", "--accept", "fair")
    seen, reaching = lab.reach_every_child(2)
    served_by = {pid for pid, _ in seen}
    assert len(served_by) == 2
    _known_sequence(lab.url)
    blocking_done = 3 + reaching

    def stats_from(expected_blocking: int) -> int:
        stats = get(f"{lab.url}/stats").json()
        assert _counts(stats["totals"]["requests"]) == {**EXPECTED, "blocking": (expected_blocking, 0)}
        assert sorted(p["task_id"] for p in stats["processes"]) == [0, 1]
        assert {p["pid"] for p in stats["processes"]} == served_by
        return int(stats["server"]["answered_by"]["pid"])

    # Which child accepts is the kernel's choice, so the test makes each answer
    # /stats in turn: with the fair accept policy a child
    # running a /blocking request accepts nothing else. Each run is sent before
    # what follows it (the kernel hands connections over in order); no poll can
    # tell that a run has started (its child cannot answer), so 0.5 s is left for it to.
    with ThreadPoolExecutor(2) as pool:
        first = sent(f"{lab.url}/blocking/sleep?seconds=2", pool)
        time.sleep(0.5)
        other = stats_from(blocking_done)  # the idle child, while the first runs
        second = sent(f"{lab.url}/blocking/sleep?seconds=4", pool)  # the idle child takes it: both are busy
        time.sleep(0.5)
        freed = stats_from(blocking_done + 1)  # waits for the first child to finish, which then answers
        first_child = first.result().json()["server"]["pid"]
        assert second.result().json()["server"]["pid"] == other != first_child == freed
    assert {other, freed} == served_by


def test_an_answered_request_is_already_counted_by_every_child(start_server: StartServer) -> None:
    # bench/siege.sh's spread is the difference of two /stats readings: a
    # request whose answer the client holds must be on the board, whichever
    # child answers /stats next (found by CI: one reading came a request short).
    lab = start_server("--processes", "2", "--process-pool", "1")
    crossed = 0
    for done in range(1, 61):
        served_by = get(f"{lab.url}/blocking/sleep?seconds=0").json()["server"]["pid"]
        stats = get(f"{lab.url}/stats").json()
        assert stats["totals"]["requests"]["blocking"]["count"] == done
        crossed += stats["server"]["answered_by"]["pid"] != served_by
        if crossed >= 10:
            break
    assert crossed > 0, "every /stats came from the child that had just answered"


def test_stats_lists_only_the_pools_this_python_can_run(start_server: StartServer) -> None:
    lab = start_server("--process-pool", "2", "--thread-pool", "3")
    server = get(f"{lab.url}/stats").json()["server"]
    modes = get(f"{lab.url}/modes").json()
    cannot = {mode["name"]: mode["unavailable_reason"] for mode in modes if not mode["available"]}
    assert server["unavailable_modes"] == cannot  # the same reasons /modes gives
    assert {"thread_pool": 3, "process_pool": 2}.items() <= server["available_pools"].items()
    assert server["thread_pool"] == 3 and server["process_pool"] == 2  # the keys the ideal and the bench read
    if "interpreters" in cannot:  # no size for a pool this Python cannot start
        assert "interpreter_pool" not in server and "interpreter_pool" not in server["available_pools"]
    else:
        assert server["available_pools"]["interpreter_pool"] == server["interpreter_pool"] >= 1
