"""`page`: a database query, then a template render of its rows, the shape of a real web request.

The database is this process's (database.py: SQLite the lab seeded, or
PostgreSQL); the template is tornado.template's (template.py). The result
names the database that answered, the rows and the page's size and digest:
the same from SQLite and PostgreSQL, in every mode, for the same `rows`.
"""

from __future__ import annotations

import hashlib
from typing import Any

from workloads.page import database
from workloads.page.seed import SEED_ROWS, Row
from workloads.page.template import render

__all__ = ["KNOWN_ANSWERS", "SEED_ROWS", "apage", "page", "summary"]


def summary(kind: str, found: list[Row]) -> dict[str, Any]:
    """What a run returns: the database that answered, and the page rendered from its rows."""
    html = render(found).encode()
    return {"database": kind, "rows": len(found), "bytes": len(html), "sha256": hashlib.sha256(html).hexdigest()}


def page(rows: int, db_ms: float) -> dict[str, Any]:
    """Query this process's database for `rows` rows (`db_ms` spent in the database), render them; their summary."""
    db = database.current()
    return summary(db.kind, db.query(rows, db_ms))


async def apage(rows: int, db_ms: float) -> dict[str, Any]:
    """`page` on an event loop: the query awaited (PostgreSQL's asyncio pool; SQLite has none and computes)."""
    db = database.current()
    aquery = getattr(db, "aquery", None)
    found = await aquery(rows, db_ms) if aquery is not None else db.query(rows, db_ms)
    return summary(db.kind, found)


# (workload, params, expected result) on the embedded SQLite (tests/conftest.py points this process at one):
# the digests are of the page rendered from the seed rows, so they also hold for PostgreSQL.
KNOWN_ANSWERS: list[tuple[str, dict[str, Any], dict[str, Any]]] = [
    ("page", {"rows": 1, "db_ms": 0.0}, {"database": "sqlite", "rows": 1, "bytes": 374,
     "sha256": "b2804f0efde7ef837a3dab731bbfff3773c7caf72c6d76e660d616329c6488f5"}),
    ("page", {"rows": 10, "db_ms": 1.0}, {"database": "sqlite", "rows": 10, "bytes": 1403,
     "sha256": "baf87ada8c0b0da8ea7986fcbd5d0a18f8b14d179379c2d2db82a4103309e695"}),
    ("page", {"rows": 1000, "db_ms": 0.0}, {"database": "sqlite", "rows": 1000, "bytes": 115_871,
     "sha256": "d2e59969c293b8c46e264de73954711a7992668350a4d561d7ca19bade8d4ed7"}),
]  # fmt: skip
