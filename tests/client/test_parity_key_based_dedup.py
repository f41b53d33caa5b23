"""Key-based batching on a topic with deduplication: every message is stored exactly once.

With deduplication on, the broker drops an entry whose sequence id is not above the last one
it stored for the producer. Key-based batches hold interleaved sequence ids (key A: 0, 3;
key B: 1, 2), so the order and the id they go out under decide whether a batch is taken for a
duplicate. Our producer sends all open batches together, in the order of their highest
sequence ids, each under its highest sequence id (as Pulsar's Java client does).
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

import starquake.client as sq
from starquake.broker.embedded import EmbeddedBroker


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


def test_round_robin_keys_are_stored_once(dedup_broker: EmbeddedBroker) -> None:
    """k0 k1 k2 k3 k4 k0 k1 ...: every batch interleaves with the others."""
    keys = [f"k{i % 5}" for i in range(200)]
    stored, ids = _produce_and_read(sq, dedup_broker, keys, max_messages=7)
    _check_stored_once(stored, keys)
    assert (-1, -1) not in ids


@settings(
    max_examples=12,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture],
)
@given(
    choices=st.lists(st.integers(min_value=0, max_value=5), min_size=1, max_size=60),
    max_messages=st.integers(min_value=1, max_value=12),
)
def test_any_interleaving_of_keys_is_stored_once(
    dedup_broker: EmbeddedBroker, choices: list[int], max_messages: int
) -> None:
    keys = [f"key-{c}" for c in choices]
    stored, ids = _produce_and_read(sq, dedup_broker, keys, max_messages)
    _check_stored_once(stored, keys)
    assert len(ids) == len(keys)
    assert (-1, -1) not in ids
