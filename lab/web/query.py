"""Strict decoding of a request's target: its length, its bytes, its query string."""

from __future__ import annotations

from tornado.httputil import HTTPServerRequest

from lab.errors import LabError

MAX_QUERY_LENGTH = 2048
MAX_URI_LENGTH = 8192


def decode_query(request: HTTPServerRequest) -> dict[str, list[str]]:
    """Query arguments as text; 414/400 for an absurdly long URI or query, 400 for raw non-ASCII or non-UTF-8."""
    uri = request.uri or ""
    if len(uri) > MAX_URI_LENGTH:
        raise LabError(414, f"URI too long ({len(uri)} > {MAX_URI_LENGTH} characters)")
    if not uri.isascii():
        # HTTP's request target is ASCII (RFC 9112); Tornado reads other bytes
        # as Latin-1, so a raw 0xFF would otherwise reach the routes as "ÿ".
        where = next(i for i, char in enumerate(uri) if not char.isascii())
        raise LabError(
            400, f"the request target has a raw byte 0x{ord(uri[where]):02X} at {where}: percent-encode it (%XX)"
        )
    if len(request.query) > MAX_QUERY_LENGTH:
        raise LabError(400, f"query string too long ({len(request.query)} > {MAX_QUERY_LENGTH} characters)")
    try:
        # Tornado decodes the names as Latin-1 and leaves the values as bytes: both are UTF-8.
        return {
            name.encode("latin-1").decode("utf-8"): [value.decode("utf-8") for value in values]
            for name, values in request.query_arguments.items()
        }
    except UnicodeDecodeError:
        raise LabError(400, "query string is not valid UTF-8") from None
