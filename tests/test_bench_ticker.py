"""bench/lib/ticker.py: begin once, then ticks on its own thread until the with block ends, and none after."""

from __future__ import annotations

import threading

from bench.lib.locust import HostSampler
from bench.lib.ticker import Ticker


class Recorder(Ticker):
    def __init__(self) -> None:
        super().__init__("recorder", 0.001)
        self.calls: list[tuple[str, str]] = []
        self.ticked = threading.Event()

    def begin(self) -> None:
        self.calls.append(("begin", threading.current_thread().name))

    def tick(self) -> None:
        self.calls.append(("tick", threading.current_thread().name))
        if sum(call == "tick" for call, _ in self.calls) >= 3:
            self.ticked.set()


def test_begin_runs_once_then_ticks_on_the_named_thread_until_the_block_ends() -> None:
    with Recorder() as recorder:
        assert recorder.ticked.wait(30)
    seen = len(recorder.calls)
    assert recorder.calls[0] == ("begin", "recorder")
    assert {call for call, _ in recorder.calls[1:]} == {"tick"}
    assert {name for _, name in recorder.calls} == {"recorder"}
    assert not recorder._thread.is_alive()
    assert len(recorder.calls) == seen  # leaving the block joined the thread: no tick comes after it


def test_the_host_sampler_writes_a_row_a_tick_from_its_first_reading() -> None:
    with HostSampler(lambda: (1, 2), 0.001) as sampler:
        for _ in range(3000):  # a poll, bounded (30 s), for two rows
            if len(sampler.rows) >= 2:
                break
            threading.Event().wait(0.01)
    row = sampler.rows[0]
    assert (row["pool_running"], row["pool_waiting"]) == (1, 2)
    assert all(0 <= row[key] <= 100 for key in ("user_pct", "system_pct", "idle_pct", "steal_pct"))
