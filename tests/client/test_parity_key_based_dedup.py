"""Key-based batching on a topic with deduplication: every message is stored exactly once.

With deduplication on, the broker drops an entry whose sequence id is not above the last one
it stored for the producer. Key-based batches hold interleaved sequence ids (key A: 0, 3;
key B: 1, 2), so the order and the id they go out under decide whether a batch is taken for a
duplicate. Our producer sends all open batches together, in the order of their highest
sequence ids, each under its highest sequence id (as Pulsar's Java client does). The official
client sends them in the order of their lowest ids, each under its lowest id and without
``highest_sequence_id``: the broker then counts the batch as that id alone, as Pulsar's does
(not as a run of consecutive ids), so nothing is dropped either.
"""

from __future__ import annotations

import threading
import time
import types
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pulsar
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from official_client import make_client
from raw_connection import RawConnection

import starquake.client as sq
from starquake.broker.embedded import EmbeddedBroker
from starquake.protocol import commands
from starquake.protocol._generated import starquake_wire_pb2 as pb
from starquake.protocol.framing import encode_entry

T = pb.BaseCommand
UNSET = (1 << 64) - 1  # -1 as the unsigned wire fields carry it


@pytest.fixture(scope="module")
def dedup_broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[EmbeddedBroker]:
    data: Path = tmp_path_factory.mktemp("kb-dedup") / "data"
    with EmbeddedBroker(data, brokerDeduplicationEnabled=True) as broker:
        yield broker


def _topic() -> str:
    return f"persistent://public/default/kb-dedup-{uuid.uuid4().hex[:12]}"


def _produce_and_read(
    module: types.ModuleType,
    broker: EmbeddedBroker,
    keys: list[str],
    max_messages: int,
) -> tuple[list[tuple[str, int]], list[tuple[int, int]]]:
    """Send message ``i`` with key ``keys[i]`` asynchronously through a key-based batching
    producer; return what the topic holds afterwards ((key, i) in stored order) and the ids
    the sends completed with."""
    client = make_client(module, broker)
    topic = _topic()
    try:
        producer = client.create_producer(
            topic,
            batching_enabled=True,
            batching_type=module.BatchingType.KeyBased,
            batching_max_messages=max_messages,
            batching_max_publish_delay_ms=60_000,  # only full batches and the flush send
            block_if_queue_full=True,
        )
        ids: list[tuple[int, int]] = []
        lock = threading.Lock()

        def done(result: Any, msg_id: Any) -> None:
            assert result == module.Result.Ok
            with lock:
                ids.append((msg_id.ledger_id(), msg_id.entry_id()))

        for i, key in enumerate(keys):
            producer.send_async(str(i).encode(), done, partition_key=key)
        producer.flush()
        deadline = time.monotonic() + 10
        while len(ids) < len(keys) and time.monotonic() < deadline:
            time.sleep(0.01)
        reader = client.create_reader(topic, module.MessageId.earliest)
        stored = []
        while reader.has_message_available():
            msg = reader.read_next(5000)
            stored.append((msg.partition_key(), int(msg.data())))
        return stored, ids
    finally:
        client.close()


def _check_stored_once(stored: list[tuple[str, int]], keys: list[str]) -> None:
    """Each message stored once, and the messages of each key in the order they were sent."""
    assert sorted(i for _, i in stored) == list(range(len(keys)))
    assert all(keys[i] == key for key, i in stored)
    for key in set(keys):
        order = [i for k, i in stored if k == key]
        assert order == sorted(order)


def test_runs_of_keys_are_stored_once_by_both_clients(dedup_broker: EmbeddedBroker) -> None:
    """Keys in runs of three that come back (k0 k0 k0 k1 k1 k1 ... k0 k0 k0): a key's batch
    spans the sequence ids of other keys' batches."""
    keys = [f"k{(i // 3) % 4}" for i in range(120)]
    outcomes = {}
    for module in (pulsar, sq):
        stored, ids = _produce_and_read(module, dedup_broker, keys, max_messages=5)
        _check_stored_once(stored, keys)
        assert len(ids) == len(keys)
        assert (-1, -1) not in ids  # no send was answered as a duplicate
        outcomes[module.__name__] = sorted(i for _, i in stored)
    assert outcomes["pulsar"] == outcomes["starquake.client"]


@pytest.mark.parametrize("module", [pulsar, sq], ids=["official", "starquake"])
def test_round_robin_keys_are_stored_once(
    dedup_broker: EmbeddedBroker, module: types.ModuleType
) -> None:
    """k0 k1 k2 k3 k4 k0 k1 ...: every batch interleaves with the others."""
    keys = [f"k{i % 5}" for i in range(200)]
    stored, ids = _produce_and_read(module, dedup_broker, keys, max_messages=7)
    _check_stored_once(stored, keys)
    assert len(ids) == len(keys)
    assert (-1, -1) not in ids


@settings(
    max_examples=12,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture],
)
@given(
    choices=st.lists(st.integers(min_value=0, max_value=5), min_size=1, max_size=60),
    max_messages=st.integers(min_value=2, max_value=12),  # the official client needs 2+
)
def test_any_interleaving_of_keys_is_stored_once_by_both_clients(
    dedup_broker: EmbeddedBroker, choices: list[int], max_messages: int
) -> None:
    keys = [f"key-{c}" for c in choices]
    for module in (pulsar, sq):
        stored, ids = _produce_and_read(module, dedup_broker, keys, max_messages)
        _check_stored_once(stored, keys)
        assert len(ids) == len(keys)
        assert (-1, -1) not in ids


def _raw_producer(raw: RawConnection, topic: str, name: str) -> int:
    """Create producer 1 named ``name`` on ``topic``; the last sequence id the broker tells."""
    cmd = T(type=T.PRODUCER)
    cmd.producer.topic, cmd.producer.producer_name = topic, name
    cmd.producer.producer_id = cmd.producer.request_id = 1
    raw.send_command(cmd)
    reply = raw.next()
    assert reply.type == T.PRODUCER_SUCCESS, reply
    return reply.producer_success.last_sequence_id


def _raw_send_batch(raw: RawConnection, name: str, sequence_id: int) -> pb.CommandSendReceipt:
    """A SEND of a 2-message batch under ``sequence_id``, without ``highest_sequence_id`` (as
    the official client sends every batch); its receipt."""
    meta = pb.MessageMetadata(producer_name=name, sequence_id=sequence_id, publish_time=1)
    meta.num_messages_in_batch = 2
    entry = encode_entry(meta, b"\x00\x00\x00\x02\x18\x01a" * 2)  # two 1-byte messages
    raw.send(commands.send_frame_header(1, sequence_id, len(entry), 2) + entry)
    reply = raw.next()
    assert reply.type == T.SEND_RECEIPT, reply
    return reply.send_receipt


def test_a_batch_without_highest_id_counts_as_its_sequence_id(
    dedup_broker: EmbeddedBroker,
) -> None:
    """As in Pulsar: the batch is the id it is sent under, not a run of ids from there; the
    receipt echoes the undeclared highest id as -1, and a reconnecting producer is told the
    id of its last batch."""
    topic = _topic()
    with RawConnection(dedup_broker.broker_port) as raw:
        raw.handshake()
        assert _raw_producer(raw, topic, "raw-kb") == -1
        first = _raw_send_batch(raw, "raw-kb", 1)  # key k0: 1, 3
        assert (first.sequence_id, first.highest_sequence_id) == (1, UNSET)
        assert first.message_id.ledgerId != UNSET
        second = _raw_send_batch(raw, "raw-kb", 2)  # key k1: 2, 4
        assert (second.sequence_id, second.highest_sequence_id) == (2, UNSET)
        assert (second.message_id.ledgerId, second.message_id.entryId) != (UNSET, UNSET)
        again = _raw_send_batch(raw, "raw-kb", 2)
        assert (again.message_id.ledgerId, again.message_id.entryId) == (UNSET, UNSET)
        assert again.highest_sequence_id == UNSET
    with RawConnection(dedup_broker.broker_port) as raw:
        raw.handshake()
        assert _raw_producer(raw, topic, "raw-kb") == 2
