"""GET /: the lab page, and GET /static/{file}: its script, style sheet and icon."""

from __future__ import annotations

from html import escape

from handlers.base import LabHandler
from lab import ROOT
from lab.errors import LabError
from lab.modes.registry import MODES

STATIC = ROOT / "static"
PAGE = STATIC / "index.html"
ASSETS = {
    # The page's ES modules: every script in static/ (app.js imports the others; no build step).
    **dict.fromkeys(sorted(path.name for path in STATIC.glob("*.js")), "text/javascript; charset=UTF-8"),
    "style.css": "text/css; charset=UTF-8",
    "favicon.svg": "image/svg+xml",
}
# Everything the page loads or connects to comes from this origin (the lab
# may run offline); the browser enforces it, and refuses inline script too.
CONTENT_SECURITY_POLICY = (
    "default-src 'self'; connect-src 'self'; img-src 'self'; style-src 'self'; script-src 'self'; "
    "base-uri 'none'; form-action 'none'; frame-ancestors 'none'"
)


def mode_links() -> str:
    """A link to every mode that runs workloads (the registry, lab/modes/registry.py), for the page's list of routes."""
    names = [name for name, mode in MODES.items() if mode.runs_workloads]
    return ", ".join(f'<a href="/{escape(name)}">/{escape(name)}</a>' for name in names)


class PageHandler(LabHandler):
    """The lab page: pick a mode, a workload and a concurrency, run a race, watch its timeline."""

    def get(self) -> None:
        self.set_header("Content-Type", "text/html; charset=UTF-8")
        self.set_header("Content-Security-Policy", CONTENT_SECURITY_POLICY)
        self.write(PAGE.read_text().replace("<!--mode-links-->", mode_links()))


class AssetHandler(LabHandler):
    """The page's own scripts, stylesheet and icon (nothing comes from another origin)."""

    def get(self, name: str) -> None:
        content_type = ASSETS.get(name)
        if content_type is None:
            raise LabError(404, f"no static file {name[:60]!r}; files: {', '.join(ASSETS)}")
        self.set_header("Content-Type", content_type)
        self.write((STATIC / name).read_bytes())


routes = [(r"/", PageHandler), (r"/static/([^/]+)", AssetHandler)]
