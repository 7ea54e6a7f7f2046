"""bench.soak, short: a minute of mixed traffic with faults; every count back to its baseline, every request
accounted for, the files written, nothing left running."""

from __future__ import annotations

import csv
import json
import sys
from pathlib import Path

import pytest

from tests.bench_helpers import Tracked, is_png

pytestmark = pytest.mark.timeout(600)  # a lab of its own, a minute of traffic, quiet checks: minutes on a busy host

# The keys soak.json promises (docs/bench.md); `unaccounted` and the per-process samples are checked from outside.
KEYS = {"verdict", "unaccounted", "requests", "faults", "samples", "processes", "baseline", "checks", "stats", "mix",
        "prediction", "capacity", "settings", "machine", "notes", "url", "pings"}  # fmt: skip


def test_a_short_soak_with_faults_returns_every_count_to_its_baseline_and_leaves_nothing(tmp_path: Path) -> None:
    # No Dask (its clusters take the best part of a minute to start on a busy host) and no rehearsal; the faults
    # that replace processes: a forked server process, then a pool worker, and clients that hang up. A quiet
    # check matches in seconds (3-4 s on a loaded 2-core host): --settle 30 leaves it a wide margin and bounds
    # what a failing check, or a fault waiting for the lab to go quiet, adds to the test's time.
    out = tmp_path / "soak"
    argv = [sys.executable, "-m", "bench.soak", "--minutes", "1", "--warmup", "10", "--fault-every", "8",
            "--faults", "kill-child,disconnect,kill-worker", "--no-rehearse", "--solo-runs", "1", "--race-every", "15",
            "--sample-every", "5", "--settle", "30", "--modes", "blocking,threading,processing,async",
            "--out", str(out)]  # fmt: skip
    with Tracked(argv) as run:
        stdout, stderr = run.communicate(timeout=540)
        assert run.survivors() == []
    doc = json.loads((out / "soak.json").read_text())
    assert set(doc) >= KEYS
    # The verdict passes: a lab that leaks nothing passes every rule on a short soak as on a long one (too few
    # samples for a trend say so and pass; a rising one fails). Exit 1 is a failed verdict.
    failed = [f"{c['rule']} ({c['subject']}): {c['detail']}" for c in doc["verdict"]["checks"] if not c["ok"]]
    assert run.process.returncode == 0 and failed == [], (failed, stderr[-3000:])
    assert stdout.startswith("PASS")
    requests = doc["requests"]
    assert doc["unaccounted"] == 0 == requests["unaccounted"], doc["unexpected"]
    assert requests["sent"] == requests["answered"] + requests["counted_errors"] > 100
    with (out / "requests.csv").open() as file:
        assert sum(1 for _ in csv.DictReader(file)) == requests["sent"]
    faults = doc["faults"]
    assert [f["name"] for f in faults][:1] == ["kill-child"], "the soak ran out of time for its first fault"
    for fault in faults:
        assert fault["ok"] and not fault["skipped"], fault
    killed = faults[0]["observed"]
    assert killed["new_pid"] not in (None, killed["killed"])
    # Every quiet check found each role's processes, descriptors and threads exactly as at the baseline.
    baseline = doc["baseline"]
    assert baseline["matched"] and baseline["orphans"] == []
    assert len(doc["checks"]) == len([f for f in faults if f["phase"] == "soak"]) + 1  # one after each, one at the end
    for check in doc["checks"]:
        assert check["matched"] and check["counts"] == baseline["counts"], check["check"]["detail"]
        assert check["orphans"] == []
    roles = {info["role"] for info in doc["processes"].values()}
    assert {"parent", "upstream", "server[0]", "server[1]", "processing-worker[0]", "processing-worker[1]"} <= roles
    for samples in doc["samples"].values():
        assert {"t", "pid", "rss_bytes", "fds", "threads", "children"} <= set(samples[0])
    rules = {c["rule"] for c in doc["verdict"]["checks"]}
    assert {"accounting", "unexpected errors", "baseline return", "no orphans", "rss growth", "rss trend",
            "ping steady"} <= rules  # fmt: skip
    assert "# Soak of" in (out / "soak.md").read_text() and is_png(out / "soak.png")
    assert (out / "server.log").exists()
    assert "soak 00:" in stderr  # the progress line
