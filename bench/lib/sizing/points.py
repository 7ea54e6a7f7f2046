"""The points the advisor sweeps: the one it predicts, its neighbours, and the rules of thumb people apply."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from bench.lib.sizing.model import Point

PREDICTED = "predicted"
NEIGHBOUR = "neighbour"
# gunicorn's design page: "(2 x $num_cores) + 1" sync workers as a starting point.
SYNC_RULE = "rule: 2 x cores + 1 workers"
# The other folk rule: a process per core with a few threads each.
THREADS_RULE = "rule: cores x 2-4 threads"
RULES = (SYNC_RULE, THREADS_RULE)


@dataclass(frozen=True)
class Swept:
    """A point to measure and why it is in the sweep (a point can be several things at once)."""

    point: Point
    roles: tuple[str, ...]

    @property
    def is_rule(self) -> bool:
        return any(role in RULES for role in self.roles)


def rules_of_thumb(cores: int) -> list[tuple[Point, str]]:
    """`2 x cores + 1` sync workers, and processes = cores with 2 and with 4 threads."""
    return [(Point(2 * cores + 1, 1), SYNC_RULE), (Point(cores, 2), THREADS_RULE), (Point(cores, 4), THREADS_RULE)]


def neighbours(point: Point) -> list[Point]:
    """One process fewer and one more; half the threads and twice as many."""
    p, t = point.processes, point.threads
    found = [Point(p - 1, t), Point(p + 1, t), Point(p, t // 2), Point(p, 2 * t)]
    return [n for n in found if n.processes >= 1 and n.threads >= 1 and n != point]


def sweep_points(predicted: Point, cores: int, *, quick: bool, fits: Callable[[Point], bool]) -> list[Swept]:
    """The predicted point first, then its neighbours (not with `quick`), then the rules of thumb (with `quick`
    only the first of each); each point once, with all its roles; points that do not `fit` left out."""
    wanted: list[tuple[Point, str]] = [(predicted, PREDICTED)]
    if not quick:
        wanted += [(point, NEIGHBOUR) for point in neighbours(predicted)]
    rules = rules_of_thumb(cores)
    wanted += rules[:2] if quick else rules
    roles: dict[Point, list[str]] = {}
    for point, role in wanted:
        if point == predicted or fits(point):
            roles.setdefault(point, [])
            if role not in roles[point]:
                roles[point].append(role)
    return [Swept(point, tuple(found)) for point, found in roles.items()]


def order(points: list[Swept], round_number: int) -> list[Swept]:
    """Round 1 in order, round 2 backwards, and so on (A B C, C B A): a host that speeds up or slows down
    steadily over the run favours no point."""
    return points if round_number % 2 else points[::-1]
