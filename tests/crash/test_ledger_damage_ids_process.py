"""Damage in the ledger being written at a kill -9 never moves entry ids (real broker process)."""

from __future__ import annotations

import os
import shutil
import struct
from pathlib import Path
from urllib.parse import quote

import pulsar
import pytest
from broker_process import BrokerProcess, close_after_kill, process_client, read_all
from hypothesis import HealthCheck, Phase, given, settings
from hypothesis import strategies as st
from official_client import receive_count, receive_until_quiet
from stored_cursors import wait_acknowledgments_stored

TOPIC = "persistent://public/default/damage-ids"
EARLIEST = pulsar.InitialPosition.Earliest
SENT = [f"message-{i:03d}".encode() for i in range(30)]
ACKED = 5


def _spans(path: Path) -> list[tuple[int, int]]:
    """(start, end) of each record: a 16-byte file header (u16 format version at 4), then
    [u32 length][u32 crc][u64 entry id, from version 2][data] records, then the zeros the
    file was preallocated with."""
    raw = path.read_bytes()
    header = 16 if struct.unpack_from("<H", raw, 4)[0] >= 2 else 8
    spans, pos = [], 16
    while pos + header <= len(raw) and any(raw[pos : pos + header]):
        (length,) = struct.unpack_from("<I", raw, pos)
        spans.append((pos, pos + header + length))
        pos += header + length
    return spans


@pytest.fixture(scope="module")
def crashed(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, list[tuple[int, int]]]:
    """A data directory left by kill -9: 30 messages, "sub" acknowledged the first five."""
    data = tmp_path_factory.mktemp("crashed") / "data"
    broker = BrokerProcess(data)
    broker.start()
    try:
        client = process_client(broker.url)
        consumer = client.subscribe(TOPIC, "sub", initial_position=EARLIEST)
        producer = client.create_producer(TOPIC, batching_enabled=False)
        ids = [producer.send(d) for d in SENT]
        for _ in range(ACKED):
            consumer.acknowledge(consumer.receive(5000))
        positions = [(m.ledger_id(), m.entry_id()) for m in ids]
        wait_acknowledgments_stored(data, "sub", positions[:ACKED])
        broker.kill()  # no index file for the ledger being written
        close_after_kill(client)
    finally:
        broker.cleanup()
    return data, positions


def _ledger(data: Path) -> Path:
    (path,) = (data / "ledgers" / quote(TOPIC, safe="")).glob("*.log")
    return path


def _check(data: Path, positions: list[tuple[int, int]], lost: set[int]) -> None:
    broker = BrokerProcess(data)
    broker.start()
    try:
        stored = read_all(broker.url, TOPIC)
        kept = [i for i in range(len(SENT)) if i not in lost]
        assert stored == [(SENT[i], positions[i]) for i in kept]
        client = process_client(broker.url)
        consumer = client.subscribe(TOPIC, "sub")
        unacked = [SENT[i] for i in kept if i >= ACKED]
        got = receive_count(consumer, len(unacked), acknowledge=True)
        assert [m.data() for m in got] == unacked
        assert receive_until_quiet(consumer, 300) == [], "more than the unacknowledged"
        client.close()
    finally:
        broker.cleanup()
    if lost:
        first, last = min(lost), max(lost)
        what = f"entry {first} is" if first == last else f"entries {first} to {last} are"
        assert what in broker.log(), broker.log()


def test_a_zeroed_region_spanning_five_records_loses_exactly_them(
    crashed: tuple[Path, list[tuple[int, int]]], tmp_path: Path
) -> None:
    template, positions = crashed
    data = tmp_path / "data"
    shutil.copytree(template, data)
    path = _ledger(data)
    spans = _spans(path)
    start, end = spans[10][0] + 4, spans[14][1] - 4
    raw = bytearray(path.read_bytes())
    raw[start:end] = bytes(end - start)
    path.write_bytes(bytes(raw))
    lost = {k for k, (a, b) in enumerate(spans) if a < end and b > start}
    assert lost == {10, 11, 12, 13, 14}
    _check(data, positions, lost)


@settings(
    max_examples=int(os.environ.get("STARQUAKE_DAMAGE_EXAMPLES", "6")),
    deadline=None,
    phases=[Phase.explicit, Phase.reuse, Phase.generate],  # a broker per example: no shrinking
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(data=st.data())
def test_damage_before_the_last_record_never_moves_an_id(
    crashed: tuple[Path, list[tuple[int, int]]],
    tmp_path_factory: pytest.TempPathFactory,
    data: st.DataObject,
) -> None:
    template, positions = crashed
    directory = tmp_path_factory.mktemp("damaged") / "data"
    shutil.copytree(template, directory)
    path = _ledger(directory)
    spans = _spans(path)
    # any range that leaves the last record whole (damage reaching the end is a torn tail)
    start = data.draw(st.integers(0, spans[-1][0] - 1), label="start")
    length = data.draw(st.integers(1, spans[-1][0] - start), label="length")
    mask = data.draw(st.integers(1, 255), label="xor")
    raw = bytearray(path.read_bytes())
    for i in range(start, start + length):
        raw[i] ^= mask
    path.write_bytes(bytes(raw))
    lost = {k for k, (a, b) in enumerate(spans) if a < start + length and b > start}
    _check(directory, positions, lost)
