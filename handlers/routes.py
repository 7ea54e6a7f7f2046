"""Every handler module's `routes`, joined: the one list of URLs the app serves."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from tornado.routing import PathMatches

from handlers import catalog, compare, metrics, page, ping, race, run, stats

if TYPE_CHECKING:
    from lab.serve.services import Services

# Tornado tries the routes in this order, and most requests are /ping (a race's probes) or a run.
MODULES = (ping, run, page, catalog, stats, metrics, compare, race)


def all_routes(services: Services) -> list[tuple[PathMatches, Any, dict[str, Any]]]:
    """Every module's routes, each handler given the server's services."""
    # A handler may say how its pattern is matched (its `matcher`); Tornado matches the others as paths.
    return [
        (getattr(handler, "matcher", PathMatches)(pattern), handler, {"services": services})
        for module in MODULES
        for pattern, handler in module.routes
    ]
