"""What one server process keeps up to date cheaply under a crowd: what it holds (lab/serve/accept/), its GC."""

from __future__ import annotations

import gc
from collections.abc import Iterator

import pytest

from lab import collector
from lab.web.occupancy import Occupancy


def test_occupancy_load_follows_every_change() -> None:
    occupancy = Occupancy()
    changes: list[float] = []
    fullness: list[bool] = []

    def on_change() -> None:
        changes.append(occupancy.load)
        fullness.append(occupancy.full)

    occupancy.watch(on_change)
    occupancy.hold("connection", 1.0)
    occupancy.move("connection", "request", 0.5)  # one change: never a moment with room in between
    occupancy.hold("request", 0.25)  # held again: replaces its share, not added to it
    occupancy.hold("other", 0.5)
    occupancy.release("missing")  # nothing held: no change
    assert changes == [1.0, 0.5, 0.25, 0.75]
    assert fullness == [True, False, False, False]
    occupancy.release("request")
    occupancy.release("other")
    assert occupancy.load == 0.0


def test_occupancy_is_exactly_empty_when_nothing_is_held() -> None:
    occupancy = Occupancy()
    for key in range(1000):  # thirds do not sum back to zero in floating point
        occupancy.hold(key, 1 / 3)
    for key in range(1000):
        occupancy.release(key)
    assert occupancy.load == 0.0


@pytest.fixture
def restored_collector() -> Iterator[None]:
    thresholds = gc.get_threshold()
    yield
    gc.unfreeze()
    gc.set_threshold(*thresholds)


def test_settle_freezes_start_up_and_collects_the_young_less_often(restored_collector: None) -> None:
    _, middle, old = gc.get_threshold()
    collector.settle()
    assert gc.get_freeze_count() > 0
    assert gc.get_threshold() == (collector.YOUNG_THRESHOLD, middle, old)
