"""What a client sends does not grow the logs byte for byte: lines are clipped, and --no-access-log means no line."""

from __future__ import annotations

import logging
from collections.abc import Iterator

import pytest

from lab.logs import MESSAGE_CHARS
from tests.conftest import StartServer
from tests.inproc import InProcessLab
from tests.lab_server import get
from tests.procs import wait_for
from tests.rawhttp import get_raw

HUGE = 250_000  # characters of URI: under the 256 KB the server reads headers into, far over the 8192 it serves
# What one request may add to a log: a clipped URI, a clipped message, the line's own words.
LINE_BUDGET = 700


def test_a_250_kb_uri_adds_a_few_hundred_bytes_to_the_logs(start_server: StartServer) -> None:
    lab = start_server("--process-pool", "1")  # with the access log: a line per request
    upstream = get(f"{lab.url}/stats").json()["server"]["upstream"]
    assert wait_for(lambda: "GET /stats " in lab.log())  # (its line is written a batch at a time: lab/logs.py)
    before = lab.log_path.stat().st_size
    for target in ("/" + "a" * HUGE, "/blocking?n=" + "9" * HUGE, "/stats?" + "%FF" * (HUGE // 3)):
        assert get(lab.url + target).status == 414
    # The embedded upstream's log is the same file (its stderr); its lines name its port.
    assert get(upstream + "/delay?seconds=" + "1" * HUGE).status == 414
    assert wait_for(lambda: lab.log().count(" 414 GET ") == 4), lab.log()[-2000:]
    grown = lab.log_path.stat().st_size - before
    assert grown <= 4 * LINE_BUDGET, lab.log()[-3000:]
    assert "characters)" in lab.log()  # each clipped line says how long the original was


class _Records(logging.Handler):
    def __init__(self) -> None:
        super().__init__(logging.DEBUG)
        self.records: list[logging.LogRecord] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.records.append(record)


@pytest.fixture
def records() -> Iterator[list[logging.LogRecord]]:
    handler = _Records()
    root = logging.getLogger()
    root.addHandler(handler)
    try:
        yield handler.records
    finally:
        root.removeHandler(handler)


def test_without_the_access_log_errors_add_no_line(app: InProcessLab, records: list[logging.LogRecord]) -> None:
    # The in-process app runs with --no-access-log: Tornado's own warning for
    # each 4xx (quoting the whole URI) is not written either.
    for target in (b"/nope", b"/blocking?n=-1", b"/" + b"b" * 9000, b"/stats?" + b"x" * 3000):
        assert 400 <= get_raw(app.url, target).status < 500
    assert get_raw(app.url, b"/ping").status == 200  # every earlier answer has been logged, or not, by now
    assert [r.getMessage()[:80] for r in records if r.name.startswith("tornado")] == []


def test_every_log_line_is_clipped_whoever_writes_it() -> None:
    from lab.logs import Bounded

    record = logging.LogRecord("tornado.general", logging.INFO, __file__, 1, "Malformed %s", ("x" * 10_000,), None)
    Bounded().filter(record)
    message = record.getMessage()
    assert len(message) < MESSAGE_CHARS + 40 and message.endswith("(10,010 characters)")
