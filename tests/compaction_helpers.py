"""Helpers of the compaction tests: trigger and wait over HTTP, keyed data sets, readers."""

from __future__ import annotations

import random
import time
from typing import Any

import pulsar
from admin_http import admin_json
from polling import wait_for

Message = tuple[str, bytes]


def admin_path(topic: str, suffix: str) -> str:
    """``/admin/v2/persistent/tenant/ns/topic/<suffix>`` of a full persistent topic name."""
    return "/admin/v2/persistent/" + topic.removeprefix("persistent://") + "/" + suffix


def compaction_status(broker: Any, topic: str) -> dict[str, Any]:
    status, body = admin_json(broker, "GET", admin_path(topic, "compaction"))
    assert status == 200, body
    assert isinstance(body, dict)
    return body


def wait_compaction(broker: Any, topic: str, timeout: float = 60) -> dict[str, Any]:
    """Poll the status until no compaction runs; the final status."""
    deadline = time.monotonic() + timeout
    while True:
        status = compaction_status(broker, topic)
        if status["status"] != "RUNNING":
            return status
        assert time.monotonic() < deadline, "the compaction did not finish"
        time.sleep(0.02)


def wait_compacted_automatically(broker: Any, topic: str, timeout: float = 20) -> None:
    """Fail unless a compaction the broker triggered by itself succeeds within ``timeout``."""
    wait_for(
        lambda: compaction_status(broker, topic)["status"] == "SUCCESS",
        f"an automatic compaction of {topic}",
        timeout,
    )


def compact(broker: Any, topic: str) -> None:
    """Trigger a compaction over HTTP and wait for it to succeed."""
    status, body = admin_json(broker, "PUT", admin_path(topic, "compaction"))
    assert status == 204, body
    assert wait_compaction(broker, topic) == {"status": "SUCCESS", "lastError": ""}


def keyed_data(
    count: int, keys: int, deleted: int, seed: int = 7
) -> tuple[list[Message], list[Message]]:
    """``count`` messages over ``keys`` keys in random order, the last message of the first
    ``deleted`` keys being an empty value (a deletion), and some other keys deleted on the way
    then written again; and what a compacted view of them holds, in order."""
    rng = random.Random(seed)
    names = [f"k{rng.randrange(keys)}" for _ in range(count)]
    last = {name: i for i, name in enumerate(names)}
    gone = {f"k{j}" for j in range(deleted)}
    midway = {f"k{j}" for j in range(deleted, deleted + 5)}
    messages: list[Message] = []
    for i, name in enumerate(names):
        empty = (name in gone and last[name] == i) or (
            name in midway and count // 3 <= i < count // 2 and last[name] != i
        )
        messages.append((name, b"" if empty else f"{name}:{i}".encode()))
    expected = [(k, v) for i, (k, v) in enumerate(messages) if last[k] == i and v]
    return messages, expected


def send_all(producer: pulsar.Producer, messages: list[Message]) -> None:
    for key, value in messages:
        producer.send_async(value, None, partition_key=key)
    producer.flush()


def read_quiet(reader: Any, timeout_ms: int = 1500) -> list[pulsar.Message]:
    """What a reader (or consumer) gets until nothing arrives for ``timeout_ms``."""
    out = []
    while True:
        try:
            if hasattr(reader, "read_next"):
                msg = reader.read_next(timeout_ms)
            else:
                msg = reader.receive(timeout_ms)
        except pulsar.Timeout:
            return out
        out.append(msg)


def read_count(reader: Any, count: int, timeout_ms: int = 10_000) -> list[pulsar.Message]:
    """``count`` messages of a reader (or consumer), each within ``timeout_ms``, then checks that
    no other follows at once (one that would is an extra message)."""
    out = []
    for _ in range(count):
        if hasattr(reader, "read_next"):
            out.append(reader.read_next(timeout_ms))
        else:
            out.append(reader.receive(timeout_ms))
    assert read_quiet(reader, 300) == [], "more messages than expected"
    return out


def pairs(messages: list[pulsar.Message]) -> list[Message]:
    return [(m.partition_key(), m.data()) for m in messages]


def id_key(msg: pulsar.Message) -> tuple[int, int, int]:
    mid = msg.message_id()
    return mid.ledger_id(), mid.entry_id(), mid.batch_index()
