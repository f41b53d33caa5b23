"""Damaged or unusable metadata through a real broker process: never acted on, always loud."""

from __future__ import annotations

import contextlib
import os
import shutil
import sqlite3
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pulsar
import pytest
from admin_http import admin_json
from broker_process import BrokerProcess, process_client
from hypothesis import HealthCheck, Phase, given, settings
from hypothesis import strategies as st
from official_client import receive_covering
from stored_cursors import wait_acknowledgments_stored

TOPIC = "persistent://public/default/md"
PARTITIONED = "persistent://public/default/parts"
EARLIEST = pulsar.InitialPosition.Earliest
SENT = [f"m{i}".encode() for i in range(70)]
ACKED = 10  # "acked" acknowledged the first ten; "fresh" acknowledged nothing


def _values(data_dir: Path) -> dict[str, bytes]:
    with contextlib.closing(sqlite3.connect(data_dir / "metadata.db")) as db:
        return {k: bytes(v) for k, v in db.execute("SELECT key, value FROM kv")}


def _set_value(data_dir: Path, key: str, value: bytes) -> None:
    with contextlib.closing(sqlite3.connect(data_dir / "metadata.db", isolation_level=None)) as db:
        db.execute("UPDATE kv SET value = ? WHERE key = ?", (value, key))


@pytest.fixture(scope="module")
def template(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A cleanly stopped broker's data directory: a topic with deduplication on, two
    subscriptions (one with acknowledgments), and a partitioned topic."""
    data = tmp_path_factory.mktemp("template") / "data"
    broker = BrokerProcess(data, "brokerDeduplicationEnabled=true")
    broker.start()
    try:
        status, _ = admin_json(
            broker, "PUT", "/admin/v2/persistent/public/default/parts/partitions", 2
        )
        assert status == 204
        client = process_client(broker.url)
        acked = client.subscribe(TOPIC, "acked", initial_position=EARLIEST)
        client.subscribe(TOPIC, "fresh", initial_position=EARLIEST)
        producer = client.create_producer(TOPIC, producer_name="p", batching_enabled=False)
        ids = [producer.send(data, sequence_id=i) for i, data in enumerate(SENT)]
        for _ in range(ACKED):
            acked.acknowledge(acked.receive(5000))
        wait_acknowledgments_stored(
            data, "acked", [(m.ledger_id(), m.entry_id()) for m in ids[:ACKED]]
        )
        client.close()
    finally:
        if broker.running:
            broker.stop()
    return data


@contextlib.contextmanager
def _copy(template: Path, tmp: Path) -> Iterator[BrokerProcess]:
    data = tmp / "data"
    shutil.copytree(template, data)
    broker = BrokerProcess(data, "brokerDeduplicationEnabled=true")
    try:
        yield broker
    finally:
        broker.cleanup()


def _check_or_refused(broker: BrokerProcess, key: str) -> None:
    """The broker runs on what is intact and refuses, naming ``key``, what depends on it."""
    try:
        broker.start()
    except RuntimeError:
        assert f"'{key}'" in broker.log() and "damaged" in broker.log(), broker.log()
        assert "cannot start the broker" in broker.log()
        return
    client = process_client(broker.url)
    try:
        for sub, unacked in (("acked", SENT[ACKED:]), ("fresh", SENT)):
            try:
                consumer = client.subscribe(TOPIC, sub)
            except pulsar.PulsarException:
                assert f"'{key}'" in broker.log() and "damaged" in broker.log()
                return
            got = receive_covering(consumer, unacked)
            assert set(unacked) <= set(got), f"{sub} skipped unacknowledged messages"
            consumer.close()
        # deduplication: the next sequence id is a new message, never dropped as a duplicate
        producer = client.create_producer(TOPIC, producer_name="p", batching_enabled=False)
        producer.send(b"next", sequence_id=len(SENT))
        reader = client.create_reader(TOPIC, pulsar.MessageId.earliest)
        seen = []
        while reader.has_message_available():
            seen.append(reader.read_next(5000).data())
        assert b"next" in seen
        status, body = admin_json(
            broker, "GET", "/admin/v2/persistent/public/default/parts/partitions"
        )
        assert status == 200 and body["partitions"] == 2, (status, body)
    finally:
        client.close()
    if f"'{key}'" in broker.log():
        assert "damaged" in broker.log()


@settings(
    max_examples=int(os.environ.get("STARQUAKE_METADATA_EXAMPLES", "8")),
    deadline=None,
    phases=[Phase.explicit, Phase.reuse, Phase.generate],  # a broker per example: no shrinking
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(data=st.data())
def test_a_damaged_metadata_value_is_never_acted_on(
    template: Path, tmp_path_factory: pytest.TempPathFactory, data: st.DataObject
) -> None:
    values = _values(template)
    key = data.draw(st.sampled_from(sorted(values)), label="key")
    value = bytearray(values[key])
    index = data.draw(st.integers(0, len(value) - 1), label="byte")
    value[index] ^= data.draw(st.integers(1, 255), label="xor")
    with _copy(template, tmp_path_factory.mktemp("damaged")) as broker:
        _set_value(broker.data_dir, key, bytes(value))
        _check_or_refused(broker, key)


@pytest.mark.parametrize(
    ("key_part", "damage"),
    [
        ("/acked", "cursor"),  # was: 60 unacknowledged messages skipped
        ("dedup", "snapshot"),  # was: new sends answered as duplicates and dropped
        ("/parts", "partitions"),  # was: half a partitioned topic hidden
    ],
)
def test_the_campaign_damages_are_refused(
    template: Path, tmp_path: Path, key_part: str, damage: str
) -> None:
    values = _values(template)
    (key,) = [k for k in values if key_part in k and (damage != "partitions" or "partitioned" in k)]
    value = bytearray(values[key])
    value[len(value) // 2] ^= 0x04
    with _copy(template, tmp_path) as broker:
        _set_value(broker.data_dir, key, bytes(value))
        _check_or_refused(broker, key)
        assert f"'{key}'" in broker.log()


def test_values_stored_by_the_previous_version_are_read(template: Path, tmp_path: Path) -> None:
    with _copy(template, tmp_path) as broker:
        path = broker.data_dir / "metadata.db"
        with contextlib.closing(sqlite3.connect(path, isolation_level=None)) as db:
            db.execute("CREATE TABLE old (key TEXT PRIMARY KEY, value BLOB NOT NULL) WITHOUT ROWID")
            db.execute("INSERT INTO old SELECT key, value FROM kv")
            db.execute("DROP TABLE kv")
            db.execute("ALTER TABLE old RENAME TO kv")
            db.execute("PRAGMA user_version = 0")
        _check_or_refused(broker, "no key is damaged")
        assert "damaged" not in broker.log()


def _standalone_fails(data: Path) -> list[str]:
    result = subprocess.run(
        [
            *(sys.executable, "-m", "starquake.cli.main", "standalone", "--data-dir", str(data)),
            *("--broker-port", "0", "--web-port", "0", "--bind-address", "127.0.0.1"),
        ],
        capture_output=True,
        timeout=60,
    )
    assert result.returncode == 1, result.stderr.decode()
    return result.stderr.decode().strip().splitlines()


def test_a_malformed_metadata_file_stops_the_start_in_one_line(
    template: Path, tmp_path: Path
) -> None:
    data = tmp_path / "data"
    shutil.copytree(template, data)
    db = data / "metadata.db"
    raw = bytearray(db.read_bytes())
    raw[:100] = b"\xa5" * 100  # the database header
    db.write_bytes(bytes(raw))
    (line,) = _standalone_fails(data)
    assert line.startswith("starquake: cannot start the broker: ") and str(db) in line


def test_a_read_only_metadata_file_stops_the_start_in_one_line(
    template: Path, tmp_path: Path
) -> None:
    data = tmp_path / "data"
    shutil.copytree(template, data)
    db = data / "metadata.db"
    db.chmod(0o444)
    immutable = os.geteuid() == 0  # root writes read-only files: make it immutable instead
    if immutable:
        if shutil.which("chattr") is None:
            pytest.skip("running as root without chattr")
        subprocess.run(["chattr", "+i", str(db)], check=True)
    try:
        (line,) = _standalone_fails(data)
    finally:
        if immutable:
            subprocess.run(["chattr", "-i", str(db)], check=True)
    assert line.startswith("starquake: cannot start the broker: ") and str(db) in line
    assert "readonly" in line or "read-only" in line


def test_a_damaged_schema_version_is_refused_not_replaced(tmp_path: Path) -> None:
    topic = "persistent://public/default/with-schema"
    broker = BrokerProcess(tmp_path / "data")
    broker.start()
    try:
        client = process_client(broker.url)
        client.create_producer(topic, schema=pulsar.schema.StringSchema()).send("a")
        client.close()
        broker.stop()
        (key,) = [k for k in _values(broker.data_dir) if k.startswith("/schemas/")]
        value = bytearray(_values(broker.data_dir)[key])
        value[5] ^= 0x01
        _set_value(broker.data_dir, key, bytes(value))
        broker.start()
        client = process_client(broker.url, operation_timeout_seconds=3)
        with pytest.raises(pulsar.PulsarException):
            client.create_producer(topic, schema=pulsar.schema.StringSchema())
        client.close()
        assert f"'{key}'" in broker.log() and "damaged" in broker.log()
        assert _values(broker.data_dir)[key] == bytes(value)  # left for the operator, as found
    finally:
        broker.cleanup()
