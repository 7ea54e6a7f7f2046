"""The application factory: routes and settings, no side effects."""

from __future__ import annotations

import logging

from tornado.web import Application, RequestHandler

from handlers.base import NotFoundHandler
from handlers.routes import all_routes
from lab.config import Config
from lab.serve.services import Services

access_log = logging.getLogger("tornado.access")

# Probed hundreds of times a second during a race; logging each would bury
# the requests being measured (and cost the blocked loop time).
QUIET_PATHS = frozenset({"/ping"})


def make_app(config: Config, services: Services) -> Application:
    def log_request(handler: RequestHandler) -> None:
        # Tornado calls this once for every request it finishes, errors and
        # abandoned requests included (the access log only: lab/web/lifecycle.py counts them).
        if config.access_log and handler.request.path not in QUIET_PATHS:
            status = handler.get_status()
            level = logging.INFO if status < 400 else logging.WARNING if status < 500 else logging.ERROR
            request = handler.request
            access_log.log(level, "%d %s %s %.1fms", status, request.method, request.uri, request.request_time() * 1000)

    return Application(
        all_routes(services),
        default_handler_class=NotFoundHandler,
        default_handler_args={"services": services},
        log_function=log_request,
        debug=config.debug,
    )
