"""`page`: a query then a template render, in every mode, on the embedded SQLite and on a real PostgreSQL.

The rows come from the database: every answer's digest is that of the page
rendered from the seed rows, and names the database that answered. The
PostgreSQL is the session's own (tests/postgres.py), stopped and started
again to see requests get 503 while it is gone and pages once it is back.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from types import SimpleNamespace

import psycopg
import pytest

import peers.app
from lab import ROOT
from lab.modes.interpreters.runner import unavailable_inside
from lab.modes.registry import MODES
from lab.scratch import sweep
from tests.builds import needs_gil
from tests.conftest import StartServer
from tests.envelopes import assert_envelope, assert_error, max_concurrency, run_intervals
from tests.lab_server import LabServer, Reply, copies, get, get_many
from tests.postgres import PostgresCluster, cluster
from tests.test_gil import RELEASES_BELOW, gil_share
from workloads.page import database, summary
from workloads.page.errors import Unavailable
from workloads.page.seed import rows
from workloads.page.sqlite import SqliteDatabase

pytestmark = pytest.mark.timeout(300)  # a Dask cluster and a PostgreSQL cluster start on a busy machine


@pytest.fixture(scope="module")
def postgres() -> Iterator[PostgresCluster]:
    yield from cluster()


def expected(count: int, kind: str) -> dict[str, object]:
    """What a page of `count` rows answers: the page rendered from the seed rows themselves."""
    return summary(kind, list(rows(count)))


def modes_here(server: LabServer) -> list[str]:
    listed = {mode["name"]: mode for mode in get(f"{server.url}/modes").json()}
    return [name for name, mode in listed.items() if mode["available"] and MODES[name].runs("page")]


def assert_pages_everywhere(server: LabServer, kind: str, db_ms: float = 30) -> dict[str, dict[str, float]]:
    """page in every mode this server runs: its rows from `kind`, as seeded; each mode's timing."""
    modes = modes_here(server)
    assert {"blocking", "threading", "processing", "distributed", "async"} <= set(modes)
    timings = {}
    for mode in modes:
        body = get(f"{server.url}/{mode}/page?rows=25&db_ms={db_ms:g}").json()
        assert_envelope(body, mode, "page")
        assert body["result"] == expected(25, kind), mode
        timings[mode] = body["timing"]
    return timings


def test_page_on_the_embedded_sqlite_in_every_mode(server: LabServer) -> None:
    # SQLite runs in the thread that queries: its db_ms is computing (without the GIL), nothing waits. Against
    # the same page with no query time, in the same run: 30 ms of counting is many times the render's CPU of 25
    # rows (a query run elsewhere would leave the two alike). A worker's first page opens the database, and
    # pays its CPU time: the reference is the least of four pages each, which a pool of up to three workers
    # cannot all have opened theirs on.
    passes = [assert_pages_everywhere(server, "sqlite", db_ms=0) for _ in range(4)]
    for mode, timing in assert_pages_everywhere(server, "sqlite").items():
        alone = min(found[mode]["cpu_ms"] for found in passes)
        assert timing["io_wait_ms"] == 0 == max(found[mode]["io_wait_ms"] for found in passes), (mode, timing)
        assert timing["cpu_ms"] > 3 * alone, (mode, timing, alone)


def test_page_on_postgresql_in_every_mode(start_server: StartServer, postgres: PostgresCluster) -> None:
    lab = start_server("--database", postgres.url)
    for mode, timing in assert_pages_everywhere(lab, "postgresql").items():
        # pg_sleep(0.03) ran in the database while this run waited on its socket.
        assert timing["io_wait_ms"] >= 30 - 0.5, (mode, timing)  # (the sleep's 30 ms, less clock grain)


def _active_sleeps(url: str, stop: threading.Event) -> int:
    """The most pg_sleep queries the database ran at once, sampled until `stop`."""
    most = 0
    with psycopg.connect(url, autocommit=True) as conn:
        while not stop.is_set():
            found = conn.execute(
                "SELECT count(*) FROM pg_stat_activity WHERE state = 'active' AND query LIKE '%pg_sleep%' "
                "AND pid <> pg_backend_pid()"
            ).fetchone()
            most = max(most, found[0] if found else 0)
            time.sleep(0.05)
    return most


def test_async_page_holds_many_queries_at_once_on_one_thread(
    start_server: StartServer, postgres: PostgresCluster
) -> None:
    lab = start_server("--database", postgres.url)
    get(f"{lab.url}/async/page?rows=1&db_ms=0")  # the event loop's pool opens
    stop = threading.Event()
    with ThreadPoolExecutor(1) as watcher:
        seen = watcher.submit(_active_sleeps, postgres.url, stop)
        replies = get_many(copies(f"{lab.url}/async/page?rows=5&db_ms=3000", 12))
        stop.set()
        most = seen.result()
    assert [reply.status for reply in replies] == [200] * 12, [reply.body for reply in replies]
    bodies = [reply.json() for reply in replies]
    assert all(body["result"] == expected(5, "postgresql") for body in bodies)
    # One thread, the server's event loop, held them all...
    assert {(b["worker"]["pid"], b["worker"]["thread"]) for b in bodies} == {(lab.pid, "MainThread")}
    assert max_concurrency(run_intervals(replies)) == 12
    # ... and the database ran them at once: 12 queries sleeping together at some instant. The pool opens
    # connections as they are asked for, one after another (psycopg_pool grows one at a time): the first
    # query's 3 s outlast what the last may wait for its connection (POOL_TIMEOUT_S, then a 503).
    assert most == 12, most


@pytest.mark.parametrize(
    ("query", "fragment"),
    [("rows=0", "rows must be an integer between 1 and 10000"), ("rows=10001", "rows"),
     ("db_ms=-1", "db_ms must be a number between 0 and 5000"), ("db_ms=5000.1", "db_ms"), ("limit=3", "unknown")],
)  # fmt: skip
def test_page_params_out_of_range_are_refused(server: LabServer, query: str, fragment: str) -> None:
    assert_error(get(f"{server.url}/threading/page?{query}"), 400, fragment)
    assert_error(get(f"{server.url}/async/page?{query}"), 400, fragment)


@pytest.mark.parametrize(
    ("url", "fragment"),
    [
        ("mysql://lab@localhost/lab", "is not a postgresql://"),
        ("postgresql://lab@/lab?nosuchoption=1", "does not parse"),
        ("postgresql://lab@/lab?host=/nonexistent-realreq", "cannot use it"),
    ],
)
def test_a_database_url_that_does_not_parse_or_refuses_ends_the_server_at_start_up(url: str, fragment: str) -> None:
    done = subprocess.run([sys.executable, "server.py", "--port", "0", "--database", url], cwd=ROOT,
                          capture_output=True, text=True, timeout=60, check=False)  # fmt: skip
    assert done.returncode == 2, done.stderr
    errors = [line for line in done.stderr.splitlines() if "error:" in line]
    assert len(errors) == 1 and fragment in errors[0] and "Traceback" not in done.stderr, done.stderr


def _unavailable(reply: Reply) -> bool:
    return (
        reply.status == 503 and int(reply.headers["Retry-After"]) > 0 and "database" in reply.json()["error"]["message"]
    )


def test_the_database_going_away_gets_503s_and_its_return_gets_pages(
    start_server: StartServer, postgres: PostgresCluster
) -> None:
    lab = start_server("--database", postgres.url, "--process-pool", "1")
    urls = [f"{lab.url}/{mode}/page?rows=3&db_ms=1000" for mode in ("threading", "async", "processing")]
    assert [reply.status for reply in get_many(urls)] == [200, 200, 200]
    with ThreadPoolExecutor(1) as burst:
        # Mid-burst: the database stops while these queries sleep in it.
        during = burst.submit(get_many, [url for url in urls for _ in range(3)], 60.0)
        time.sleep(0.5)
        postgres.stop()
        replies = during.result()
    # Each request answered, and none hung: a page, or 503 with Retry-After (a query cut off, no connection).
    assert all(reply.status == 200 or _unavailable(reply) for reply in replies), [r.status for r in replies]
    assert any(_unavailable(reply) for reply in replies)
    gone = get_many(urls)
    assert all(_unavailable(reply) for reply in gone), [(r.status, r.body[:200]) for r in gone]
    postgres.restart()
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        back = get_many(urls)
        if all(reply.status == 200 for reply in back):
            break
        # Modes come back one by one (each process's pool reconnects on its own): a page or a 503 meanwhile.
        assert all(reply.status == 200 or _unavailable(reply) for reply in back), [
            (r.status, r.body[:200]) for r in back
        ]
        time.sleep(0.5)
    assert [reply.json()["result"] for reply in back] == [expected(3, "postgresql")] * 3


@pytest.mark.slow
@needs_gil
def test_sqlite_lets_go_of_the_gil_while_it_queries() -> None:
    # tests/test_gil.py's probe (its docstring says how wide apart the readings are) on a page that is all
    # query, in this process, on the embedded SQLite that tests/conftest.py made: the query counts in
    # SQLite's C code, inside one sqlite3_step, which CPython runs with the GIL released. (The render holds
    # it, but for at most ~115 ms at 10,000 rows, under the probe's 250 ms switch interval, and each row
    # fetched before it lets go: the probe cannot single it out; test_mix.py probes pure Python holding.)
    assert gil_share("page", params={"rows": 1, "db_ms": 150.0}) < RELEASES_BELOW


def test_a_database_gone_inside_a_sub_interpreter_is_still_a_503() -> None:
    # ExecutionFailed carries the type's name and message out of the interpreter, not the exception itself.
    failed = Exception("ExecutionFailed")
    failed.excinfo = SimpleNamespace(type=SimpleNamespace(__name__="Unavailable"), msg="the database is unavailable")  # type: ignore[attr-defined]
    gone = unavailable_inside(failed)
    assert gone is not None and str(gone) == "the database is unavailable"
    assert unavailable_inside(ValueError("other")) is None


def test_the_peers_wsgi_app_serves_page_and_a_503_when_its_database_is_gone(monkeypatch: pytest.MonkeyPatch) -> None:
    answers: list[tuple[str, dict[str, str]]] = []

    def call(query: str) -> dict[str, object]:
        environ = {"REQUEST_METHOD": "GET", "PATH_INFO": "/wsgi/page", "QUERY_STRING": query}
        body = b"".join(peers.app.application(environ, lambda status, headers: answers.append((status, dict(headers)))))
        answer: dict[str, object] = json.loads(body)
        return answer

    assert call("rows=7&db_ms=1")["result"] == expected(7, "sqlite")  # this process's embedded SQLite (conftest)

    def gone() -> None:
        raise Unavailable("the database is unavailable (gone); retry")

    monkeypatch.setattr(database, "current", gone)
    assert "unavailable" in str(call("rows=7"))
    status, headers = answers[-1]
    assert status.startswith("503") and headers["Retry-After"] == "2"


def test_sqlite_times_its_count_before_its_first_query(page_database: str) -> None:
    # A process's first query is sized from a count it timed just before: 20 ms asked, well under a second
    # of CPU spent (50x margin: a rate learnt from a count SQLite skipped made the first queries take seconds).
    db = SqliteDatabase(page_database.removeprefix("sqlite://"))
    start = time.thread_time()
    assert len(db.query(10, 20.0)) == 10
    assert time.thread_time() - start < 1.0
    assert db.rate is not None and db.rate > 0
    db.close()


def test_a_test_server_killed_outright_leaves_no_folder_behind(tmp_path: Path) -> None:
    lab = LabServer([], tmp_path / "server.log").start()
    folders = list(Path(tempfile.gettempdir()).glob(f"lab-page-{lab.pid}-*"))
    assert len(folders) == 1  # its SQLite database's
    lab.cleanup()  # killed, as the start_server fixture kills what it started: no stop() of its own
    assert not folders[0].exists()


@pytest.mark.parametrize("prefix", ["lab-page-", "lab-dask-"])  # its SQLite file; its Dask cluster's folder
def test_a_server_killed_outright_leaves_its_folders_for_the_next_start_to_remove(tmp_path: Path, prefix: str) -> None:
    dead = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, text=True,
                          check=True).stdout.strip()  # fmt: skip
    (tmp_path / f"{prefix}{dead}-abc").mkdir()  # a server that got SIGKILL: no stop() removed it
    (tmp_path / f"{prefix}{os.getpid()}-def").mkdir()  # a live one's
    (tmp_path / f"{prefix}other").mkdir()  # not named for a pid: not ours to judge
    sweep(str(tmp_path), prefix)
    assert sorted(path.name for path in tmp_path.iterdir()) == [f"{prefix}{os.getpid()}-def", f"{prefix}other"]
