"""bench/cluster.py's parts that need no network: its refusals, the break-even arithmetic, the requests' account."""

from __future__ import annotations

import pytest

from bench import cluster
from bench.lib import netns
from bench.lib.faults import Burst, account
from bench.lib.granularity import break_even
from bench.lib.hosts import DaskTimeouts, Reply


@pytest.mark.parametrize(
    ("patch", "needs"),
    [
        ("geteuid", "root, to build network namespaces"),
        ("which", "iproute2's ip and tc (apt-get install iproute2)"),
    ],
)
def test_without_root_or_iproute2_it_says_what_it_needs_in_one_line(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], patch: str, needs: str
) -> None:
    if patch == "geteuid":
        monkeypatch.setattr("bench.lib.netns.os.geteuid", lambda: 1000)
    else:
        monkeypatch.setattr("bench.lib.netns.shutil.which", lambda name: None)
    assert cluster.main(["--quick"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and err.startswith(f"error: bench.cluster needs {needs}")


def test_bad_parts_and_faults_are_usage_errors(capsys: pytest.CaptureFixture[str]) -> None:
    for argv in (["--parts", "overhead,nothing"], ["--faults", "worker-cut,earthquake"]):
        with pytest.raises(SystemExit) as stopped:
            cluster.parse_args(argv)
        assert stopped.value.code == 2
    assert "--faults takes worker-cut" in capsys.readouterr().err


def test_a_rate_in_tcs_words_is_bits_per_second() -> None:
    assert [netns.rate_bits(r) for r in ("10mbit", "16kbit", "800bit", "1gbit")] == [10**7, 16_000, 800, 10**9]
    with pytest.raises(ValueError, match="a rate like"):
        netns.rate_bits("10 MB/s")


def _row(rate: str, size: float, work: float, efficiency: float, trip: float = 0.0) -> dict[str, object]:
    return {"rate": rate, "size_ms": size, "work_ms": work, "trip_ms": trip, "efficiency": efficiency,
            "bytes_per_task": 1_000_000}  # fmt: skip


def test_break_even_is_predicted_from_bytes_and_rate_and_measured_where_efficiency_crosses_a_half() -> None:
    rows = [
        _row("unlimited", 0, 0.01, 0.0, trip=5.0), _row("unlimited", 10, 10, 0.66), _row("unlimited", 100, 100, 0.95),
        _row("10mbit", 0, 0.01, 0.0, trip=805.0), _row("10mbit", 100, 100, 0.11), _row("10mbit", 1000, 1000, 0.55),
    ]  # fmt: skip
    found = {row["rate"]: row for row in break_even(rows)}
    # 1 MB at 10 Mbit/s is 800 ms on the link, plus the unlimited link's trip of 5 ms.
    assert found["10mbit"]["link_ms"] == 800.0 and found["10mbit"]["predicted_ms"] == 805.0
    assert 100 < found["10mbit"]["measured_ms"] < 1000  # between the sizes around the crossing
    assert found["10mbit"]["ratio"] == pytest.approx(found["10mbit"]["measured_ms"] / 805.0, abs=0.01)
    # Every size measured pays at an unlimited link: no crossing to measure, and it says so.
    assert found["unlimited"]["measured_ms"] is None and "every size" in found["unlimited"]["verdict"]


def _reply(status: int, seconds: float, retry_after: bool = False) -> Reply:
    body = {"error": {"message": "lost; retry"}} if status != 200 else {"result": 1}
    return Reply(status, body, {"Retry-After": "1"} if retry_after else {}, 100.0, 100.0 + seconds)


def test_every_request_is_counted_once_and_the_late_ones_are_named() -> None:
    burst = Burst("/distributed/sleep?seconds=1", 6, job_timeout=8, detection_s=12)
    replies = [_reply(200, 1), _reply(503, 5, retry_after=True), _reply(503, 2), _reply(504, 8), _reply(0, 30),
               _reply(200, 25)]  # fmt: skip
    row = account(replies, burst)
    assert (row["sent"], row["ok"], row["retry_after"], row["bare_503"], row["timeouts_504"], row["unaccounted"]) == (
        6, 2, 1, 1, 1, 1)  # fmt: skip
    assert row["sent"] == sum(row[k] for k in ("ok", "retry_after", "bare_503", "timeouts_504", "other", "unaccounted"))
    assert (row["late"], row["bound_s"], row["longest_s"]) == (2, 20, 30)


def test_the_detection_bound_follows_daskss_settings() -> None:
    # The ttl check (every ttl, for a worker unseen past max(ttl, 5 s), then the nanny's call times out)
    # or TCP's own timeout, whichever comes first.
    assert DaskTimeouts(worker_ttl="5s", connect="3s", tcp="11s").detection_s() == 12.0
    assert DaskTimeouts(worker_ttl="3s", connect="3s", tcp="30s").detection_s() == 11.0
    assert DaskTimeouts().detection_s() == 31.0
