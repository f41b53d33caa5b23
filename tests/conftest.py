"""Shared fixtures: a real broker on free ports, and the official client against it; the
hypothesis profile of every property test; the order tests start in."""

from __future__ import annotations

import json
import os
import tempfile
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
import schedule_order
from hypothesis import HealthCheck, settings

from starquake.broker.embedded import EmbeddedBroker

# Property tests check behaviour, not speed: on a shared, busy machine input generation and
# examples may be slow, which must not fail a run.
settings.register_profile("starquake", deadline=None, suppress_health_check=[HealthCheck.too_slow])
settings.load_profile("starquake")

# The tests start hundreds of Python processes (brokers, the command line, Spark's workers).
# Where PYTHONDONTWRITEBYTECODE is set, each would compile every Starquake module again (a fifth
# of a broker's start-up); they keep their compiled modules under the temp directory instead,
# never in the source tree (pytest-xdist's workers inherit this, being started later).
if os.environ.get("PYTHONDONTWRITEBYTECODE") and not os.environ.get("PYTHONPYCACHEPREFIX"):
    del os.environ["PYTHONDONTWRITEBYTECODE"]
    os.environ["PYTHONPYCACHEPREFIX"] = str(Path(tempfile.gettempdir()) / "starquake-test-pycache")


@pytest.hookimpl(trylast=True)  # after -k and -m deselected tests
def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Slices of equal measured time for the parallel workers (see schedule_order.py)."""
    schedule_order.order(items)


# ``pytest --record-durations`` rewrites tests/durations.json from this run: each test's time
# (set-up, call and tear-down) in seconds, for the tests taking longer than the default.
_MEASURED: dict[str, float] = {}


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption(
        "--record-durations",
        action="store_true",
        help="rewrite tests/durations.json (the order tests start in) from this run",
    )


def pytest_runtest_logreport(report: pytest.TestReport) -> None:
    _MEASURED[report.nodeid] = _MEASURED.get(report.nodeid, 0.0) + report.duration


def pytest_sessionfinish(session: pytest.Session) -> None:
    config = session.config
    if config.getoption("record_durations") and not hasattr(config, "workerinput"):
        kept = {
            nodeid: round(seconds, 1)
            for nodeid, seconds in sorted(_MEASURED.items())
            if seconds >= 2 * schedule_order.UNKNOWN_SECONDS
        }
        schedule_order.DURATIONS.write_text(json.dumps(kept, indent=0) + "\n")


@pytest.fixture
def broker(tmp_path: Path) -> Iterator[EmbeddedBroker]:
    with EmbeddedBroker(tmp_path / "data") as running:
        yield running


@pytest.fixture
def topic() -> str:
    return f"persistent://public/default/t-{uuid.uuid4().hex[:12]}"
