"""Strict decoding of a request's query string."""

from __future__ import annotations

from tornado.httputil import HTTPServerRequest

from lab.errors import LabError

MAX_QUERY_LENGTH = 2048
MAX_URI_LENGTH = 8192


def decode_query(request: HTTPServerRequest) -> dict[str, list[str]]:
    """Query arguments as text; 414/400 for an absurdly long URI or query, 400 for non-UTF-8."""
    if len(request.uri or "") > MAX_URI_LENGTH:
        raise LabError(414, f"URI too long ({len(request.uri or '')} > {MAX_URI_LENGTH} characters)")
    if len(request.query) > MAX_QUERY_LENGTH:
        raise LabError(400, f"query string too long ({len(request.query)} > {MAX_QUERY_LENGTH} characters)")
    try:
        return {name: [value.decode("utf-8") for value in values] for name, values in request.query_arguments.items()}
    except UnicodeDecodeError:
        raise LabError(400, "query string is not valid UTF-8") from None
