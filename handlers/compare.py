"""GET /compare: the latest comparison of the lab with uWSGI and gunicorn (bench/compare.py), for the page."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from handlers.base import LabHandler
from lab.errors import LabError


def latest(results: Path) -> Path | None:
    """The newest bench/results/*/ holding a compare.json and its findings.json, or None."""
    runs = [path.parent for path in results.glob("*/compare.json") if (path.parent / "findings.json").exists()]
    return max(runs, key=lambda run: (run / "compare.json").stat().st_mtime, default=None)


class CompareHandler(LabHandler):
    """Read-only: what the last `make compare` (or `python -m bench.compare`) measured."""

    def get(self) -> None:
        run = latest(self.services.config.results)
        if run is None:
            raise LabError(404, "no comparison yet: run `make compare` (bench/compare.py), then reload")
        try:
            rows: list[dict[str, Any]] = json.loads((run / "compare.json").read_text())
            about: dict[str, Any] = json.loads((run / "findings.json").read_text())
        except (OSError, ValueError) as error:
            raise LabError(404, f"the latest comparison ({run.name}) cannot be read: {error}") from None
        self.write({"run": run.name, **{k: about.get(k) for k in ("preset", "question", "quick", "findings")},
                    "rows": rows})  # fmt: skip


routes = [(r"/compare/?", CompareHandler)]
