"""GET /compare: the latest comparison of the lab with uWSGI and gunicorn (bench/compare.py), for the page."""

from __future__ import annotations

import contextlib
import json
from pathlib import Path
from typing import Any

from handlers.base import LabHandler
from lab.errors import LabError


def latest(results: Path) -> Path | None:
    """The newest bench/results/*/ holding a compare.json and its findings.json, or None."""
    runs = []
    for path in results.glob("*/compare.json"):
        with contextlib.suppress(OSError):  # a run deleted meanwhile is no run
            if (path.parent / "findings.json").exists():
                runs.append((path.stat().st_mtime, path.parent.name, path.parent))
    return max(runs)[2] if runs else None


def _read(path: Path) -> Any:
    # A ratio without an ideal is NaN in Python's JSON, which a browser's JSON.parse refuses: null instead.
    return json.loads(path.read_text(), parse_constant=lambda _: None)


class CompareHandler(LabHandler):
    """Read-only: what the last `make compare` (or `python -m bench.compare`) measured."""

    def get(self) -> None:
        run = latest(self.services.config.results)
        if run is None:
            raise LabError(404, "no comparison yet: run `make compare` (bench/compare.py), then reload")
        try:
            rows: list[dict[str, Any]] = _read(run / "compare.json")
            about: dict[str, Any] = _read(run / "findings.json")
        except (OSError, ValueError) as error:
            raise LabError(404, f"the latest comparison ({run.name}) cannot be read: {error}") from None
        self.write({"run": run.name, **{k: about.get(k) for k in ("preset", "question", "quick", "findings")},
                    "rows": rows})  # fmt: skip


routes = [(r"/compare/?", CompareHandler)]
