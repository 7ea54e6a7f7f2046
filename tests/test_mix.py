"""`mix`: computing then waiting, in every mode, and the envelope's `io_wait_ms` that the dial moves.

Structure, not stopwatch: `compute_ms` is CPU time by the thread's own clock, so
a run's `cpu_ms` is at least that however loaded the host; a wait is capped at
what was asked, so `io_wait_ms` is exactly `wait_ms`; what else the host does
lands in `core_wait_ms`, never in either.
"""

from __future__ import annotations

import asyncio
import time
from concurrent.futures import ThreadPoolExecutor

import pytest

from lab.modes.registry import MODES
from tests.builds import needs_gil
from tests.envelopes import assert_envelope, assert_error, max_concurrency, run_intervals
from tests.lab_server import LabServer, Reply, copies, get, sent
from tests.test_gil import HOLDS_ABOVE, RELEASES_BELOW, SIZES, gil_share
from workloads import waits
from workloads.mix import compute, mix
from workloads.registry import WORKLOADS, await_timed, run_timed
from workloads.steps import Steps
from workloads.waits import waiting

pytestmark = pytest.mark.timeout(240)  # the first /distributed request starts a Dask cluster

# Asyncio's timers fire at or after their time, but a millisecond is the grain a loaded loop guarantees.
TIMER_GRAIN_MS = 1.0


def _modes(server: LabServer) -> list[str]:
    """Every mode this server runs mix in: those that run workloads and are available here, and async (awaited)."""
    listed = {mode["name"]: mode for mode in get(f"{server.url}/modes").json()}
    return [name for name, mode in listed.items() if mode["available"] and MODES[name].runs("mix")]


def test_every_mode_runs_mix_and_times_its_wait_where_it_waited(server: LabServer) -> None:
    modes = _modes(server)
    assert {"blocking", "threading", "processing", "distributed", "async"} <= set(modes)
    for mode in modes:
        body = get(f"{server.url}/{mode}/mix?compute_ms=20&wait_ms=30").json()
        assert_envelope(body, mode, "mix")
        assert body["result"] == 50.0
        timing = body["timing"]
        # 20 ms by the thread's CPU clock, whatever else the host ran; a process's clock counts at least that.
        assert timing["cpu_ms"] >= 20 - 0.001, (mode, timing)
        assert timing["io_wait_ms"] == pytest.approx(30, abs=TIMER_GRAIN_MS), (mode, timing)


@needs_gil
def test_the_dial_moves_the_split_from_computing_to_waiting(server: LabServer) -> None:
    computing = get(f"{server.url}/processing/mix?compute_ms=50&wait_ms=0").json()["timing"]
    waiting_ = get(f"{server.url}/processing/mix?compute_ms=5&wait_ms=95").json()["timing"]
    # All computing: no wait on purpose, and nothing but a core to wait for (a worker alone with its GIL).
    assert computing["io_wait_ms"] == 0 and computing["cpu_ms"] >= 50 - 0.001
    assert computing["gil_wait_ms"] == 0 and computing["blocked_ms"] < computing["cpu_ms"], computing
    # Mostly waiting: the 95 ms wait is most of the run, once what the worker spent queued for a core is left out
    # (core_wait_ms: on a loaded host that can be longer than the wait itself).
    mine = waiting_["run_ms"] - waiting_["core_wait_ms"]
    assert waiting_["io_wait_ms"] == pytest.approx(95, abs=0.01) and waiting_["io_wait_ms"] > mine / 2, waiting_
    assert waiting_["io_wait_ms"] > 5 * waiting_["cpu_ms"], waiting_
    # Not blocked: its own wait is taken out of blocked, so none of it is blamed on the GIL.
    assert waiting_["blocked_ms"] < waiting_["io_wait_ms"] and waiting_["gil_wait_ms"] == 0, waiting_


@needs_gil
def test_a_wait_in_a_thread_is_not_the_gil_s(server: LabServer) -> None:
    # A thread of the server shares its GIL: before the waits were timed its sleep was all "blocked",
    # and could not be told from the GIL. Now the wait is its own part and the rest is the GIL's.
    timing = get(f"{server.url}/threading/sleep?seconds=0.05").json()["timing"]
    assert timing["io_wait_ms"] == pytest.approx(
        50, abs=0.01
    )  # capped at the 50 ms asked: the kernel never wakes early
    assert timing["gil_wait_ms"] == timing["blocked_ms"] < timing["io_wait_ms"], timing


def _awaited_together(url: str) -> tuple[list[Reply], float]:
    """Four /async/mix runs of 30 ms computing and 300 ms waiting, and when the last request was in the kernel.

    Sent from this thread behind a 1 s /blocking run, which holds the loop, so that it reads none of them before
    all four are there, however late a client thread runs (four released together: one stalled gave three).
    """
    with ThreadPoolExecutor(5) as pool:
        hold = sent(f"{url}/blocking/sleep?seconds=1", pool)
        jobs = [sent(each, pool) for each in copies(f"{url}/async/mix?compute_ms=30&wait_ms=300", 4)]
        all_sent = time.time()
        assert hold.result().status == 200
        return [job.result() for job in jobs], all_sent


def test_async_awaits_mix_on_its_loop_thread_and_overlaps_only_the_waits(server: LabServer) -> None:
    # Four runs of 30 ms computing and 300 ms waiting: one thread computes them one at a time, but their
    # waits overlap, so at some instant all four are in progress (each computes 30 ms, waits 300). That needs all
    # four requests in hand before the first run's wait ends: none may begin before the last is sent (a stall of
    # this thread longer than the hold can undo it: checked, and tried again).
    for _ in range(3):
        replies, all_sent = _awaited_together(server.url)
        if min(reply.json()["timing"]["started"] for reply in replies) > all_sent:
            break
    else:
        pytest.fail("three times a run began before all four requests were sent")
    bodies = [reply.json() for reply in replies]
    assert {(b["worker"]["pid"], b["worker"]["thread"]) for b in bodies} == {
        (b["server"]["pid"], "MainThread") for b in bodies
    }
    assert max_concurrency(run_intervals(replies)) == 4
    for body in bodies:
        timing = body["timing"]
        assert timing["cpu_ms"] >= 30 - 0.001 and timing["io_wait_ms"] <= 300 + TIMER_GRAIN_MS, timing
        # What the wait reads short of its 300 ms is the run's own time inside it (workloads/waits.py): its steps'
        # edges computing or queued for a core, which a loaded machine can stretch past a millisecond (a CI run
        # read 298.76). It is in the run's other parts: none of the wait is lost.
        own = timing["core_wait_ms"] + timing["cpu_ms"] - 30
        assert timing["io_wait_ms"] + own >= 300 - TIMER_GRAIN_MS, timing


def test_async_serves_only_what_it_can_await(server: LabServer) -> None:
    assert_error(get(f"{server.url}/async/count"), 404, "awaits only workloads written to be awaited (mix", "count")
    assert_error(get(f"{server.url}/async/nope"), 404, "awaits only")
    assert_error(get(f"{server.url}/async/mix?wait_ms=5001"), 400, "wait_ms must be a number between 0 and 5000")
    assert_error(get(f"{server.url}/async/mix?delay=1"), 400, "unknown parameter 'delay' for mix")
    assert get(f"{server.url}/async?delay=0.01").json()["workload"] == "upstream"  # its own call, as ever
    listed = {w["name"]: w for w in get(f"{server.url}/workloads").json()}
    assert "async" in listed["mix"]["modes"] and "async" not in listed["count"]["modes"]
    assert listed["mix"]["awaitable"] and not listed["count"]["awaitable"]


@pytest.mark.parametrize("raw", ["compute_ms=-1", "compute_ms=5000.5", "wait_ms=nan", "wait_ms=1e9", "compute_ms="])
def test_mix_params_out_of_range_are_refused(server: LabServer, raw: str) -> None:
    assert_error(get(f"{server.url}/threading/mix?{raw}"), 400, raw.split("=", maxsplit=1)[0], "between 0 and 5000")


def test_the_async_mode_awaits_exactly_the_workloads_written_to_be_awaited() -> None:
    awaitable = {name for name, workload in WORKLOADS.items() if workload.awaited is not None}
    assert set(MODES["async"].awaits) == awaitable


def test_compute_holds_its_thread_for_its_cpu_time_not_the_wall_s() -> None:
    start = time.thread_time()
    compute(30)
    assert time.thread_time() - start >= 0.03
    assert mix(0, 0) == 0


def test_waits_are_counted_only_inside_a_timed_run_and_each_task_keeps_its_own() -> None:
    with waiting():  # outside a run: times nothing, fails nothing
        pass
    record = run_timed("mix", {"compute_ms": 0.0, "wait_ms": 20.0})
    assert record["io_wait"] == pytest.approx(0.02) and record["cpu"] is not None

    async def both() -> list[float | None]:
        records = await asyncio.gather(
            await_timed("mix", {"compute_ms": 0.0, "wait_ms": 10.0}),
            await_timed("mix", {"compute_ms": 0.0, "wait_ms": 40.0}),
        )
        return [r["io_wait"] for r in records]

    short, long = asyncio.run(both())
    assert short == pytest.approx(0.01, abs=TIMER_GRAIN_MS / 1000) and long == pytest.approx(
        0.04, abs=TIMER_GRAIN_MS / 1000
    )


def test_a_preemption_as_a_wait_ends_is_not_taken_out_of_it() -> None:
    # The thread's own time read as the wait ends takes 5 ms, all of it queued for a core (a preempted thread on a
    # loaded machine): a 20 ms sleep is still 20 ms of waiting on purpose, not 15.
    readings = iter([0.0, 0.005])

    def own() -> float:
        value = next(readings)
        if value:
            time.sleep(value)  # queued while reading
        return value

    with waits.counting(own) as counted:
        waits.sleep(0.02)
    assert counted.total == pytest.approx(0.02)


def test_a_sleep_that_ends_counts_what_it_asked_whatever_the_run_queue_count_says() -> None:
    # Under load this kernel's run-queue count of a thread sometimes grows by milliseconds across a sleep the
    # thread spent asleep (workloads/waits.py): read as 8 ms here, it must not be taken out of the 20 ms asked.
    readings = iter([0.0, 0.008])
    with waits.counting(lambda: next(readings)) as counted:
        waits.sleep(0.02)
    assert counted.total == pytest.approx(0.02)


def test_a_wait_cut_short_counts_its_wall_time_less_the_run_s_own() -> None:
    # Asked for an hour, cut short after a 20 ms sleep (as a cancelled await is): its wall time less the 1 ms the
    # run's own clock moved, however long a loaded machine stretched the sleep; never the hour asked.
    readings = iter([0.0, 0.001])
    outer = time.perf_counter()
    with pytest.raises(LookupError), waits.counting(lambda: next(readings)) as counted, waits.waiting(3600.0):
        time.sleep(0.02)
        raise LookupError
    outer = time.perf_counter() - outer
    assert 0.02 - 0.001 - TIMER_GRAIN_MS / 1000 <= counted.total <= outer - 0.001


@pytest.mark.slow
@needs_gil
def test_mix_holds_the_gil_while_it_computes_and_lets_go_while_it_waits() -> None:
    # tests/test_gil.py's probe (its docstring says how wide apart the two readings are), on each half; the
    # computing in runs that outlast the switch interval (tests/test_gil.py's SIZES say why).
    assert gil_share("mix", params=SIZES["mix"]) > HOLDS_ABOVE
    assert gil_share("mix", params={"compute_ms": 0.0, "wait_ms": 150.0}) < RELEASES_BELOW


def test_an_awaited_run_passes_on_its_cancellation_and_its_errors() -> None:
    async def cancelled() -> float:
        start = time.perf_counter()  # (from before the run: it must end before its 5 s wait could have)
        run = asyncio.ensure_future(await_timed("mix", {"compute_ms": 0.0, "wait_ms": 5000.0}))
        await asyncio.sleep(0.05)
        run.cancel()
        with pytest.raises(asyncio.CancelledError):
            await run
        return time.perf_counter() - start

    assert asyncio.run(cancelled()) < 4.5  # at once, not after the 5 s wait
    with pytest.raises(TypeError):
        asyncio.run(await_timed("mix", {"compute_ms": 0.0}))  # a missing param fails where it is awaited
    with pytest.raises(ValueError, match="cannot be awaited"):
        asyncio.run(await_timed("count", {"n": 1}))


def test_the_step_meter_hands_what_it_is_sent_and_thrown_to_the_coroutine_it_drives() -> None:
    async def inner() -> str:
        try:
            await asyncio.sleep(10)
        except KeyError:
            return "caught"
        return "slept"

    async def outer() -> None:
        steps = Steps()
        driver = steps.drive(inner())
        assert isinstance(driver.send(None), asyncio.Future)  # what the coroutine yields goes to the loop
        with pytest.raises(StopIteration) as stop:
            driver.throw(KeyError("thrown"))  # what the loop throws (a cancellation) reaches the coroutine
        assert stop.value.value == "caught"
        assert steps.wall > 0 and steps.core_wait is not None  # both steps timed

    asyncio.run(outer())
