"""What bench/compare.py can compare: each preset's question, its server configurations, its loads, its findings."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from bench.lib import findings
from bench.lib.peers import Setup, gunicorn, lab, uwsgi

CPU, IO = frozenset({"cpu"}), frozenset({"io"})
BOTH = CPU | IO


@dataclass(frozen=True)
class Load:
    """One burst: `concurrency` requests of `workload` released together."""

    kind: str  # "cpu" (computing) or "io" (waiting for the upstream)
    workload: str
    params: dict[str, str]
    concurrency: int = 10


@dataclass(frozen=True)
class Preset:
    name: str
    question: str
    setups: Callable[[int, bool], list[Setup]]  # (cores, quick)
    loads: Callable[[bool], list[Load]]  # (quick)
    findings: Callable[[list[dict[str, Any]]], list[str]]


def _count(quick: bool) -> Load:
    return Load("cpu", "count", {"n": "2000000" if quick else "20000000"})


def _waits(quick: bool, concurrency: int = 10) -> Load:
    return Load("io", "upstream", {"delay": "0.2" if quick else "1.0"}, concurrency)


def _side_by_side(cores: int, quick: bool) -> list[Setup]:
    setups = [
        lab("/processing", "/processing", "processing"),
        lab("/threading", "/threading", "threading"),
        lab("/blocking", "/blocking", "blocking"),
        lab("/async", "/async", "async", serves=IO),
        lab(f"--processes {cores}, /threading", "/threading", "threading", "--processes", str(cores)),
        # Tornado's own accept policy, for the lesson: an uneven spread, but a free event loop answers /ping.
        lab(
            f"--processes {cores} --accept all, /threading",
            "/threading",
            "threading",
            "--accept",
            "all",
            "--processes",
            str(cores),
        ),
        uwsgi("uwsgi-processes.ini", f"-p {cores}", "blocking", cores, serves=CPU),
        uwsgi("uwsgi-threads.ini", "-p 1 --threads 10", "threading", 1, 10, serves=BOTH),
        uwsgi("uwsgi-gevent.ini", "-p 1 --gevent 1000", "async", 1, serves=IO),
        gunicorn("gunicorn-sync.conf.py", f"sync -w {cores}", "blocking", cores, serves=CPU),
        gunicorn("gunicorn-gthread.conf.py", "gthread -w 1 --threads 10", "threading", 1, 10, serves=BOTH),
    ]
    if quick:  # two of each server: enough to see processes, threads and the spread
        keep = {"/processing", "/threading", f"-p {cores}", "-p 1 --threads 10", f"sync -w {cores}",
                "gthread -w 1 --threads 10"}  # fmt: skip
        setups = [s for s in setups if s.config in keep]
    return setups


def _processes(cores: int, quick: bool) -> list[Setup]:
    counts = [1, cores] if quick else list(range(1, 2 * cores + 1))
    return [uwsgi("uwsgi-processes.ini", f"-p {n}", "blocking", n, serves=CPU) for n in counts] + [
        gunicorn("gunicorn-sync.conf.py", f"sync -w {n}", "blocking", n, serves=CPU) for n in counts
    ]


def _grid(cores: int, quick: bool) -> list[Setup]:
    processes = [1, cores]
    threads = [1, 4] if quick else [1, 4, 10]
    return [
        uwsgi("uwsgi-threads.ini", f"-p {p} --threads {t}", "threading" if t > 1 else "blocking", p, t, serves=BOTH)
        for p in processes
        for t in threads
    ]


def _coroutines(cores: int, quick: bool) -> list[Setup]:
    return [
        uwsgi("uwsgi-gevent.ini", "-p 1 --gevent 1000", "async", 1, serves=IO),
        lab("/async", "/async", "async", serves=IO),
        uwsgi("uwsgi-threads.ini", "-p 1 --threads 10", "threading", 1, 10, serves=IO),
        gunicorn("gunicorn-gthread.conf.py", "gthread -w 1 --threads 10", "threading", 1, 10, serves=IO),
    ]


PRESETS = {
    preset.name: preset
    for preset in (
        Preset(
            "default",
            "Which server, which model? The lab's modes, uWSGI and gunicorn on the same burst.",
            _side_by_side,
            lambda quick: [_count(quick)] if quick else [_count(quick), _waits(quick)],
            findings.side_by_side,
        ),
        Preset(
            "processes",
            "Do multiple processes use multiple cores? (processes 1 to 2 x cores, CPU-bound)",
            _processes,
            lambda quick: [_count(quick)],
            findings.processes,
        ),
        Preset(
            "grid",
            "Processes x threads, for CPU-bound and I/O-bound work: which setting?",
            _grid,
            lambda quick: [_count(quick), _waits(quick)],
            findings.grid,
        ),
        Preset(
            "coroutines",
            "Coroutines for I/O: uWSGI+gevent and the lab's /async against a slow upstream.",
            _coroutines,
            lambda quick: [_waits(quick, 10), _waits(quick, 50 if quick else 200)],
            findings.coroutines,
        ),
    )
}
