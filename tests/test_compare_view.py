"""GET /compare and the page's peers view: the newest comparison in the results folder, read-only."""

from __future__ import annotations

import os
from pathlib import Path

from lab.config import Config
from tests.compare_runs import ROW, write_run
from tests.inproc import InProcessLab, serve_in_process
from tests.lab_server import get


def test_the_newest_comparison_is_served_and_none_is_a_clear_404(tmp_path: Path) -> None:
    for lab in serve_in_process(Config(results=tmp_path)):
        empty = get(f"{lab.url}/compare")
        assert empty.status == 404 and "make compare" in empty.json()["error"]["message"]
        # The newest by modification time, whatever the names say; a ratio without an ideal (NaN) as null.
        newer = write_run(tmp_path, "compare-1", [ROW, {**ROW, "config": "-p 1", "ratio": float("nan")}])
        older = write_run(tmp_path, "compare-2", [ROW])
        os.utime(older / "compare.json", (1_000_000, 1_000_000))
        (tmp_path / "compare-3").mkdir()  # a run cut short: no findings.json, not shown
        (tmp_path / "compare-3" / "compare.json").write_text("[]")
        reply = get(f"{lab.url}/compare")
        assert "NaN" not in reply.body.decode()
        doc = reply.json()
        assert doc["run"] == newer.name and doc["findings"] == ["compare-1 found"] and len(doc["rows"]) == 2
        assert doc["rows"][1]["ratio"] is None
        assert doc["question"] == "Which server?" and doc["preset"] == "default"


def test_the_page_has_a_peers_panel_and_its_script(app: InProcessLab) -> None:
    page = get(f"{app.url}/").body.decode()
    assert 'id="peers"' in page and "make compare" in page
    assert get(f"{app.url}/static/peers.js").status == 200
