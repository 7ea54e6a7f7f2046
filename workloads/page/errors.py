"""What a page's database says when it cannot answer."""

from __future__ import annotations


class Unavailable(Exception):
    """The database cannot answer now (refused, gone, out of connections): the client should retry later.

    A plain exception with a message, so that it crosses a process pool's
    pipe and a Dask worker's pickling whole; the server answers it with 503.
    """
