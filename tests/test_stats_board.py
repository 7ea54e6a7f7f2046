"""The shared-memory stats board: slots, the seqlock, recovery from a torn write, and when a process publishes."""

from __future__ import annotations

import asyncio
import os
import struct
import time

import pytest

from lab.config import Config
from lab.instruments.stats import SLOT_BYTES, Board, RequestStats, merge, summarise
from lab.serve.services import Services
from lab.web.lifecycle import RequestLife
from tests.procs import forks_alone


def test_slots_hold_their_last_document() -> None:
    board = Board(2)
    assert board.read(0) is None and board.read(1) is None
    board.write(0, {"a": 1})
    board.write(0, {"a": 2})
    board.write(1, {"b": 1})
    assert board.read(0) == {"a": 2} and board.read(1) == {"b": 1}


@forks_alone
def test_a_forked_child_writes_where_the_parent_reads() -> None:
    board = Board(1)
    pid = os.fork()
    if pid == 0:  # the child: write and leave without running any cleanup
        board.write(0, {"pid": os.getpid()})
        os._exit(0)
    os.waitpid(pid, 0)
    assert board.read(0) == {"pid": pid}


def test_a_torn_slot_is_skipped_then_recovered_by_the_next_write() -> None:
    board = Board(1)
    board.write(0, {"n": 1})
    seq, length = struct.unpack_from("<QI", board._mem, 0)
    struct.pack_into("<QI", board._mem, 0, seq + 1, length)  # a writer killed mid-write: its counter odd
    assert board.read(0, patience_s=0.01) is None
    board.write(0, {"n": 2})
    assert board.read(0) == {"n": 2}
    board.write(0, {"n": 3})
    assert board.read(0) == {"n": 3}


@forks_alone
def test_a_reader_beside_a_writer_in_another_process_gets_whole_documents_only() -> None:
    # /metrics once answered 500 during a soak: a reader in one forked server caught another's slot with the
    # new counter and the old length (0), and parsed an empty payload. A writer in a loop makes every moment
    # a mid-write one: with the old stores, two seconds of reads here raised about 200 times and took the
    # slot for never written (the counter zero-filled by struct.pack_into) about 450 times. A read may still
    # give up on a slot its writer holds past the patience (descheduled mid-write on a busy host): None.
    board = Board(1)
    board.write(0, {"n": -1, "pad": ""})
    pid = os.fork()
    if pid == 0:
        try:
            n, end = 0, time.monotonic() + 2.0
            while time.monotonic() < end:
                board.write(0, {"n": n, "pad": "x" * (n % 50)})  # payloads of many lengths, one after another
                n += 1
        finally:
            os._exit(0)  # never back into pytest in the forked child
    try:
        whole, last, end = 0, -1, time.monotonic() + 2.0
        while time.monotonic() < end:
            doc = board.read(0)
            if doc is None:
                continue
            assert doc["pad"] == "x" * (doc["n"] % 50 if doc["n"] >= 0 else 0), doc
            assert doc["n"] >= last  # never an older document than one read before
            last, whole = doc["n"], whole + 1
    finally:
        os.waitpid(pid, 0)
    assert whole > 100 and last > 100  # both sides really ran at once (some 100,000 each on a quiet machine)


def test_request_stats_sum_and_merge() -> None:
    a, b = RequestStats(), RequestStats()
    a.record("blocking", 200, 0.010, cpu=0.008)
    a.record("blocking", 400, 0.030)  # a run that did not run: no CPU time to add
    b.record("blocking", 200, 0.020, cpu=0.018)
    b.record("async", 504, 1.0)
    merged = summarise(merge([a.modes, b.modes]))
    assert merged["blocking"] == {"count": 3, "errors": 1, "statuses": {"200": 2, "400": 1}, "mean_ms": 20.0,
                                  "max_ms": 30.0, "timed": 2, "run_cpu_s": 0.026}  # fmt: skip
    assert merged["async"] == {"count": 1, "errors": 1, "statuses": {"504": 1}, "mean_ms": 1000.0,
                               "max_ms": 1000.0, "timed": 0, "run_cpu_s": 0.0}  # fmt: skip


def test_a_document_too_large_for_a_slot_is_refused() -> None:
    with pytest.raises(ValueError, match="does not fit a slot"):
        Board(1).write(0, {"x": "y" * SLOT_BYTES})


def _services(board: Board, processes: int = 2) -> Services:
    return Services(config=Config(access_log=False, processes=processes), base_url="", runners={}, task_id=None,
                    board=board, requests=RequestStats())  # fmt: skip


def _blocking_request(services: Services) -> RequestLife:
    life = services.lifecycle.begin(object())
    life.classify("blocking")
    return life


def _board_count(board: Board) -> int:
    document = board.read(0)
    assert document is not None
    return int(document["requests"].get("blocking", {}).get("count", 0))


def test_the_last_request_in_flight_reaches_the_board_at_once() -> None:
    async def scenario() -> None:
        board = Board(1)  # the slot of a forked child: its parent and siblings read it
        services = _services(board)
        services.publish()  # a moment ago: the next request's end falls inside the burst window
        _blocking_request(services).end(200)
        assert _board_count(board) == 1  # an idle process has nothing to batch
        # In a burst, an end right after a publish waits for the window; the burst's last end does not.
        first, last = _blocking_request(services), _blocking_request(services)
        services.publish()
        first.end(200)
        assert _board_count(board) == 1
        last.end(200)
        assert _board_count(board) == 3

    asyncio.run(scenario())


def test_an_unforked_server_writes_no_board_per_request() -> None:
    async def scenario() -> None:
        board = Board(1)
        services = _services(board, processes=1)
        services.publish()
        _blocking_request(services).end(200)
        assert _board_count(board) == 0  # nobody else reads its slot: /stats publishes before it reads
        services.publish()
        assert _board_count(board) == 1

    asyncio.run(scenario())
