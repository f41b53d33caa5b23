"""Shared fixtures: a real broker on free ports, and the official client against it; the
hypothesis profile of every property test; the order tests start in."""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
from hypothesis import HealthCheck, settings

from starquake.broker.embedded import EmbeddedBroker

# Property tests check behaviour, not speed: on a shared, busy machine input generation and
# examples may be slow, which must not fail a run.
settings.register_profile("starquake", deadline=None, suppress_health_check=[HealthCheck.too_slow])
settings.load_profile("starquake")


# The files whose tests take longest (most first), measured on 2 cores. They start first, so
# that parallel workers (pytest-xdist) end together instead of one working alone through a
# long test at the end. A file missing here only starts later; nothing else depends on it.
LONGEST_FIRST = (
    "spark/test_spark_exactly_once.py",
    "integration/test_partition_growth.py",
    "crash/test_crash_model.py",
    "spark/test_spark_broker_kill.py",
    "storage/test_storage_model.py",
    "crash/test_restart_safety.py",
    "crash/test_restart_defects.py",
    "crash/test_metadata_integrity_process.py",
    "crash/test_kill9.py",
    "spark/test_spark_stream.py",
    "security/test_pulsar_provisioning.py",
    "spark/test_spark_kafka_options.py",
    "crash/test_crash_regressions.py",
    "security/test_hostile_connections.py",
    "spark/test_spark_schemas.py",
    "security/test_file_permissions.py",
    "spark/test_spark_errors.py",
    "security/test_password_storm.py",
    "crash/test_compaction_crash.py",
    "crash/test_ledger_damage_ids_process.py",
    "compat/test_compaction_official.py",
    "security/test_auth_basic_conf_sources.py",
    "integration/test_dashboard_browser.py",
    "security/test_pulsar_security_keys.py",
    "integration/test_admin_refusals.py",
    "security/test_auth_refresh.py",
    "crash/test_broker_process_ports.py",
    "spark/test_spark_read.py",
    "crash/test_bulk_reader_restart.py",
    "spark/test_spark_write.py",
    "storage/test_storage_recovery.py",
)
_RANK = {name: rank for rank, name in enumerate(LONGEST_FIRST)}
_TESTS = Path(__file__).resolve().parent


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Longest files first (in :data:`LONGEST_FIRST`'s order), the rest as collected."""

    def rank(item: pytest.Item) -> int:
        try:
            name = item.path.resolve().relative_to(_TESTS).as_posix()
        except ValueError:
            return len(_RANK)
        return _RANK.get(name, len(_RANK))

    items.sort(key=rank)  # stable: collection order within a file and among the rest


@pytest.fixture
def broker(tmp_path: Path) -> Iterator[EmbeddedBroker]:
    with EmbeddedBroker(tmp_path / "data") as running:
        yield running


@pytest.fixture
def topic() -> str:
    return f"persistent://public/default/t-{uuid.uuid4().hex[:12]}"
