"""urllib for requests to this machine: never through an http_proxy from the environment.

urllib honours http_proxy for 127.0.0.1 unless no_proxy says otherwise, and
a CI host or a laptop behind a corporate proxy would then send the lab's
loopback traffic (and its measurements) through the proxy, or nowhere.
"""

from __future__ import annotations

import urllib.request
from http.client import HTTPResponse

_OPENER = urllib.request.build_opener(urllib.request.ProxyHandler({}))


def urlopen(request: str | urllib.request.Request, timeout: float) -> HTTPResponse:
    response: HTTPResponse = _OPENER.open(request, timeout=timeout)
    return response
