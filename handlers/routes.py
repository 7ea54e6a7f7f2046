"""Every handler module's `routes`, joined: the one list of URLs the app serves."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from handlers import catalog, compare, metrics, page, ping, race, run, stats

if TYPE_CHECKING:
    from lab.serve.services import Services

# Tornado tries the routes in this order, and most requests are /ping (a race's probes) or a run.
MODULES = (ping, run, page, catalog, stats, metrics, compare, race)


def all_routes(services: Services) -> list[tuple[str, Any, dict[str, Any]]]:
    """Every module's routes, each handler given the server's services."""
    return [(pattern, handler, {"services": services}) for module in MODULES for pattern, handler in module.routes]
