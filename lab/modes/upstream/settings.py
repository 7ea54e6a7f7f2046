"""The async mode's own flags: how /async calls its upstream (--upstream itself is the server's: start-up starts
the embedded upstream before any fork)."""

from __future__ import annotations

from lab.modes.upstream.client import DEFAULT_IDLE_S, UPSTREAM_IDLE_MARGIN_S
from lab.settings import Setting, Values, choices_help, seconds

# Each --upstream-client and what it does, in its help (lab/modes/upstream/client.py has both).
CLIENTS = {
    "pooled": "keep-alive connections reused across calls",
    "simple": "Tornado's SimpleAsyncHTTPClient, a new connection per call, to compare with",
}
DEFAULT_UPSTREAM_TIMEOUT = 15.0


def _pooled_is_plain_http(values: Values) -> str | None:
    upstream = values["upstream"]
    if values["upstream_client"] == "pooled" and upstream and upstream.startswith("https:"):
        return "the pooled upstream client speaks plain HTTP: add --upstream-client simple for an https upstream"
    return None


UPSTREAM_CLIENT = Setting(
    "--upstream-client",
    str,
    "pooled",
    choices=tuple(CLIENTS),
    help=choices_help("/async's HTTP client", CLIENTS, "default: %(default)s"),
    check=_pooled_is_plain_http,
)
UPSTREAM_TIMEOUT = Setting(
    "--upstream-timeout",
    seconds,
    DEFAULT_UPSTREAM_TIMEOUT,
    metavar="S",
    help="/async: a refused upstream is 502, one silent S seconds past the delay asked for is 504 "
    "(default: %(default)s)",
)
UPSTREAM_IDLE = Setting(
    "--upstream-idle",
    seconds,
    DEFAULT_IDLE_S,
    metavar="S",
    help="/async's pooled client closes an upstream connection idle for S seconds, so that after a crowd "
    "the descriptors return to rest (the embedded upstream closes its side after S + "
    f"{UPSTREAM_IDLE_MARGIN_S:g}) (default: %(default)s)",
)
