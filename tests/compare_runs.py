"""A comparison run as bench/compare.py writes it, for tests of what reads it (GET /compare, the page)."""

from __future__ import annotations

import json
from pathlib import Path

ROW = {"server": "uwsgi", "config": "-p 2", "workload": "count", "params": {"n": "20000000"}, "endpoint": "/wsgi/count",
       "concurrency": 10, "elapsed_s": 3.49, "mean_s": 2.05, "ideal_s": 3.14, "ratio": 1.11, "ping_p50_ms": 4.0,
       "ping_max_ms": 2268.0, "spread": {"101": 6, "102": 4}, "peak_processes": 3, "peak_threads": 3,
       "rss_mb": 347.0}  # fmt: skip


def write_run(results: Path, name: str, rows: list[dict[str, object]]) -> Path:
    run = results / name
    run.mkdir(parents=True)
    (run / "compare.json").write_text(json.dumps(rows))
    findings = {"preset": "default", "question": "Which server?", "quick": False, "findings": [f"{name} found"]}
    (run / "findings.json").write_text(json.dumps(findings))
    return run
