"""The order tests are collected in, so that parallel workers (pytest-xdist ``worksteal``) end
together instead of one working alone through a long test at the end.

``worksteal`` first hands each of its N workers one contiguous slice of the collected tests
(sizes ``len // N``, then the rest split the same way); a worker that runs out later takes the
second half of the longest remaining queue, from its end. So the collected list is built as N
slices of exactly those sizes, each holding about the same measured time (tests/durations.json,
written by ``pytest --record-durations``, see conftest.py), each running its longest tests
first so that what is taken from a queue's end is short.

Tests that share an expensive fixture stay on one worker: those of one module with a fixture of
module or class scope, and every test of the local SparkSession (one JVM per worker that uses
it); the Spark tests run first in their slice, so that no later steal takes them elsewhere.
"""

from __future__ import annotations

import json
import os
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

import pytest

DURATIONS = Path(__file__).resolve().parent / "durations.json"
UNKNOWN_SECONDS = 0.1  # a test missing from the file: most tests take less
SPARK_GROUP = "spark-session"


@dataclass
class Unit:
    """Tests that go to one worker together, in collection order."""

    key: str
    items: list[pytest.Item] = field(default_factory=list)
    seconds: float = 0.0


def load_durations(path: Path = DURATIONS) -> dict[str, float]:
    try:
        data = json.loads(path.read_text())
    except (OSError, ValueError):
        return {}
    return {str(k): float(v) for k, v in data.items()}


def unit_key(item: pytest.Item) -> str:
    """Which unit ``item`` belongs to: its own, its module's, or the Spark session's."""
    info = getattr(item, "_fixtureinfo", None)
    defs = info.name2fixturedefs if info is not None else {}
    if "spark" in defs:
        return SPARK_GROUP
    for name, chain in defs.items():
        if chain and chain[-1].scope in ("module", "class") and name != "event_loop":
            return item.nodeid.split("::", 1)[0]
    return item.nodeid


def build_units(items: Sequence[pytest.Item], durations: dict[str, float]) -> list[Unit]:
    units: dict[str, Unit] = {}
    for item in items:
        key = unit_key(item)
        unit = units.setdefault(key, Unit(key))
        unit.items.append(item)
        unit.seconds += durations.get(item.nodeid, UNKNOWN_SECONDS)
    return list(units.values())


def slice_sizes(count: int, workers: int) -> list[int]:
    """The sizes of the slices ``worksteal`` first hands out (in that order)."""
    sizes = []
    left = count
    for i in range(workers):
        size = left // (workers - i)
        sizes.append(size)
        left -= size
    return sizes


def _within_slice(units: list[Unit], durations: dict[str, float]) -> list[pytest.Item]:
    """The Spark session's tests first, then the longest first."""
    units.sort(key=lambda u: (u.key != SPARK_GROUP, -u.seconds))
    out = []
    for unit in units:
        if unit.key == SPARK_GROUP:
            out += _spark_order(unit.items, durations)
        else:
            out += unit.items
    return out


def _spark_order(items: list[pytest.Item], durations: dict[str, float]) -> list[pytest.Item]:
    """The shortest test first (the SparkSession starts in its set-up, which counts towards
    its timeout), then the longest first."""
    by_time = sorted(items, key=lambda item: -durations.get(item.nodeid, UNKNOWN_SECONDS))
    return by_time[-1:] + by_time[:-1]


def balanced_order(items: Sequence[pytest.Item], workers: int) -> list[pytest.Item]:
    """``items`` as ``workers`` slices of ``worksteal``'s sizes and about equal time."""
    durations = load_durations()
    units = build_units(items, durations)
    # the units of several tests first (each fits while every slice has room left), then the
    # single tests; each part longest first
    units.sort(key=lambda u: (len(u.items) == 1, -u.seconds))
    sizes = slice_sizes(len(items), workers)
    slices: list[list[Unit]] = [[] for _ in sizes]
    load = [0.0] * workers
    room = list(sizes)
    for unit in units:  # longest first, each to the least loaded slice it fits in
        fits = [i for i in range(workers) if room[i] >= len(unit.items)]
        if not fits:  # a unit larger than any slice's room: no slices
            return _fallback(items, durations)
        target = min(fits, key=lambda i: load[i])
        slices[target].append(unit)
        load[target] += unit.seconds
        room[target] -= len(unit.items)
    return [item for units_of in slices for item in _within_slice(units_of, durations)]


def _fallback(items: Sequence[pytest.Item], durations: dict[str, float]) -> list[pytest.Item]:
    """Longest first, without slices."""
    return sorted(items, key=lambda item: -durations.get(item.nodeid, UNKNOWN_SECONDS))


def order(items: list[pytest.Item]) -> None:
    """Reorder ``items`` in place for the number of workers of this run."""
    workers = int(os.environ.get("PYTEST_XDIST_WORKER_COUNT", "1") or 1)
    if workers <= 1 or len(items) < workers:
        items[:] = _fallback(items, load_durations())
        return
    items[:] = balanced_order(items, workers)
