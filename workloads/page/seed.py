"""The rows the page's database holds: made from their ids alone, so every database and every test agrees.

Integers and text only: SQLite and PostgreSQL store and return them alike
(a price is in cents, never a float), so one page renders the same bytes
from either.
"""

from __future__ import annotations

from collections.abc import Iterator

# How many rows the table holds: the most a page can ask for.
SEED_ROWS = 10_000
CATEGORIES = ("books", "garden", "kitchen", "music", "tools", "toys", "travel")
COLUMNS = ("id", "name", "category", "price_cents", "stock")
TABLE = "lab_page_items"

Row = tuple[int, str, str, int, int]


def row(item: int) -> Row:
    """Row `item` (1-based): the same on every machine, in every database."""
    return (
        item,
        f"item {item:05d} <{CATEGORIES[item % 7][:3]}> & co",  # characters the template must escape
        CATEGORIES[item % len(CATEGORIES)],
        (item * 7919) % 100_000,
        (item * 104_729) % 1_000,
    )


def rows(count: int = SEED_ROWS) -> Iterator[Row]:
    """The first `count` rows, in id order."""
    return (row(item) for item in range(1, count + 1))
