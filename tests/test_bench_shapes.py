"""bench/lib/shapes.py and siege's own lines: the sentence under siege.sh's table, from fixed numbers per shape."""

from __future__ import annotations

import pytest

from bench.lib.shapes import sentence, shape
from bench.lib.siege import StepError, parse_summary, request_lines

# siege 4.0.7's stdout and stderr with the lab's SIEGERC_LINES (json_output = false, verbose = true).
OUT = """New configuration template added to /root/.siege
HTTP/1.1 200     0.45 secs:      35 bytes ==> GET  /blocking
HTTP/1.1 200     0.91 secs:      35 bytes ==> GET  /blocking
HTTP/1.1 500     1.36 secs:      80 bytes ==> GET  /blocking
"""
ERR = """** SIEGE 4.0.7
** Preparing 3 concurrent users for battle.
The server is now under siege...

Transactions:\t\t           2 hits
Availability:\t\t       66.67 %
Elapsed time:\t\t        1.36 secs
Data transferred:\t        0.00 MB
Response time:\t\t        0.91 secs
Transaction rate:\t        1.47 trans/sec
Throughput:\t\t        0.00 MB/sec
Concurrency:\t\t        1.99
Successful transactions:           2
Failed transactions:\t           1
Longest transaction:\t        1.36
Shortest transaction:\t        0.45
"""


def test_siege_lines_and_classic_summary_are_read_back() -> None:
    lines = request_lines(OUT)
    assert [(line.status, line.seconds) for line in lines] == [(200, 0.45), (200, 0.91), (500, 1.36)]
    assert lines[0].text == "HTTP/1.1 200     0.45 secs:      35 bytes ==> GET  /blocking"
    summary = parse_summary(ERR)
    assert summary["transactions"] == 2 and summary["failed_transactions"] == 1
    times = (summary["elapsed_time"], summary["longest_transaction"], summary["shortest_transaction"])
    assert times == (1.36, 1.36, 0.45)
    with pytest.raises(StepError):
        parse_summary("siege aborted due to excessive socket failure\n")


T = 1.0
STAIRS = [T * (i + 1) for i in range(10)]  # one at a time: t, 2t, ... 10t
LATE = [8.6, 9.1, 9.3, 9.5, 9.6, 9.7, 9.8, 9.9, 9.95, 10.0]  # six threads taking turns on the GIL: all near the end
WAVES = [1.0, 1.02, 2.0, 2.03, 3.0, 3.01, 4.0, 4.02, 5.0, 5.01]  # two workers: five rounds of two
TOGETHER = [1.01, 1.01, 1.02, 1.02, 1.02, 1.03, 1.03, 1.03, 1.04, 1.05]  # the event loop awaiting the upstream


@pytest.mark.parametrize(
    ("times", "kind", "groups"),
    [
        (STAIRS, "staircase", (1,) * 10),
        (LATE, "late", (10,)),
        (WAVES, "waves", (2,) * 5),
        (TOGETHER, "together", (10,)),
    ],
)
def test_each_shape_is_told_from_its_times(times: list[float], kind: str, groups: tuple[int, ...]) -> None:
    found = shape(list(reversed(times)), T)  # in any order: siege prints them as they came back
    assert found is not None
    assert (found.kind, found.groups) == (kind, groups)
    assert (found.first_s, found.last_s) == (min(times), max(times))


def test_the_sentence_says_each_rows_shape_from_its_numbers() -> None:
    rows = [
        {"endpoint": "blocking", "responses_s": STAIRS, "solo_s": T, "lanes": 1},
        {"endpoint": "threading", "responses_s": LATE, "solo_s": T, "lanes": 2},
        {"endpoint": "processing", "responses_s": WAVES, "solo_s": T, "lanes": 2},
        {"endpoint": "async", "responses_s": TOGETHER, "solo_s": T, "lanes": None},
        {"endpoint": "no-lines", "responses_s": [], "solo_s": T, "lanes": 1},
    ]
    told = sentence(rows)
    assert told == (
        "What the rows show: blocking answered one at a time, a staircase of 10 steps from 1.00 s to 10.00 s, the last "
        "10.0x the first; threading answered all 10 late, together near the end: even the first after 8.60 s, 8.6x "
        "one request alone (t = 1.00 s); processing answered in 5 waves of about 2 (its 2 lanes), from 1.00 s to "
        "5.01 s; async answered all 10 together, after 1.01 s-1.05 s (t = 1.00 s)."
    )
    # Other numbers, other words: half as long a t makes the late threads' first answer 17.2x it.
    assert "17.2x one request alone (t = 0.50 s)" in sentence([{**rows[1], "solo_s": 0.5}])
    assert sentence([rows[-1]]) == ""
