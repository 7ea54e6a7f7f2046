"""Shared fixtures: a lab server subprocess per session, more when a test needs its own flags."""

from __future__ import annotations

import os
import signal
import socket
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from lab.database import EmbeddedDatabase
from lab.native import cap_native_threads
from tests.inproc import InProcessLab, serve_in_process
from tests.lab_server import LabServer
from workloads.ml import LAZY_ENV
from workloads.page import database

# Workloads imported in-process by unit tests get the same BLAS cap as the server.
cap_native_threads()

# Every lab the suite starts, itself or through a bench tool, loads scikit-learn only where a test runs predict or
# train (server.py --lazy-ml): loading it and training the predict model at start is about 2.5 s of CPU in each
# server process and pool worker, three quarters of a lab's start-up. tests/test_lazy_ml.py starts labs without.
os.environ[LAZY_ENV] = "1"

# A suite started in the background of a shell without job control (`make test > log &`, nohup, some CI
# runners) inherits SIGINT ignored, and so would every tool it starts: bash cannot trap an ignored signal,
# Python raises no KeyboardInterrupt for one, and the Ctrl-C tests failed on what a user at a terminal never
# has. Each test process takes Python's own handler back, which its children start from the default.
if signal.getsignal(signal.SIGINT) is signal.SIG_IGN:
    signal.signal(signal.SIGINT, signal.default_int_handler)

# The suite's longest files, longest first (seconds of one worker each in `make test ARGS=--durations=0`,
# 2026-11-29): distributed 206, page 192, bench_soak 130, bench_overhead 114, bench_size 84, bench_siege 74,
# reliability_pools 71, peers 63, reliability_lifecycle 59, bench_knee 58, page_first_minute 57, page_workload 45,
# pictures 41, bench_load 40. pytest-xdist hands a worker whole files (`--dist loadfile`), the next one as the
# worker nears the end of its last, in the order collected (`--no-loadscope-reorder`: by default it puts the
# files with most tests first, and the soak's one test of two minutes went last, the other worker idle for a
# minute at the end). Longest first, the two workers end within seconds of each other (docs/results.md). A file
# not named keeps its place after these; a stale list costs only time.
LONGEST_FILES = tuple(f"tests/test_{name}.py" for name in (
    "distributed", "page", "bench_soak", "bench_overhead", "bench_size", "bench_siege", "reliability_pools", "peers",
    "reliability_lifecycle", "bench_knee", "page_first_minute", "page_workload", "pictures", "bench_load"))  # fmt: skip


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    rank = {path: i for i, path in enumerate(LONGEST_FILES)}
    items.sort(key=lambda item: rank.get(item.nodeid.partition("::")[0], len(rank)))  # (stable: files stay whole)


StartServer = Callable[..., LabServer]


@pytest.fixture(scope="session", autouse=True)
def page_database() -> Iterator[str]:
    """An embedded SQLite for `page` run in this process (known answers, the GIL probe), as a server makes one."""
    embedded = EmbeddedDatabase.start()
    database.use(embedded.url)
    try:
        yield embedded.url
    finally:
        database.close()
        embedded.stop()


@pytest.fixture(scope="session")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LabServer]:
    """One default server shared by the read-mostly tests (start-up costs seconds)."""
    with LabServer([], tmp_path_factory.mktemp("server") / "server.log") as lab:
        yield lab


@pytest.fixture(scope="session")
def app() -> Iterator[InProcessLab]:
    """The app in this process (no pools started): routes, params and error shapes, fast."""
    yield from serve_in_process()


@pytest.fixture
def start_server(tmp_path: Path) -> Iterator[StartServer]:
    """Start a server with the given flags; every one is killed when the test ends."""
    started: list[LabServer] = []

    def start(*args: str, env: dict[str, str] | None = None, open_files: int | None = None) -> LabServer:
        lab = LabServer(list(args), tmp_path / f"server{len(started)}.log", env, open_files)
        started.append(lab)
        return lab.start()

    try:
        yield start
    finally:
        for lab in started:
            lab.cleanup()


@pytest.fixture
def refused_port() -> Iterator[int]:
    """A loopback port where connecting is refused for the whole test.

    Bound but never listening: nobody else can take it (a port closed again at
    once could go to the other xdist worker's next server), and a connect gets
    ECONNREFUSED.
    """
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        yield int(sock.getsockname()[1])
