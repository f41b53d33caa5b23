"""Dead letters of a topic encrypted end to end, through both clients.

The official client publishes what its consumer received: with the private key, the plaintext;
without it and with ``crypto_failure_action=CONSUME``, the ciphertext as a plain payload (the
encryption keys, algorithm and IV are not carried over, so nobody can decrypt it any more).
The dead letter producer does not encrypt. Ours does the same.
"""

from __future__ import annotations

import types
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pulsar
import pytest
from crypto_keys import KeyPair, rsa_pair
from official_client import make_client

import starquake.client as sq
from starquake.broker.embedded import EmbeddedBroker

MODULES = (pulsar, sq)


@pytest.fixture(scope="module")
def keys(tmp_path_factory: pytest.TempPathFactory) -> KeyPair:
    return rsa_pair(tmp_path_factory.mktemp("keys"), "dlq")


@pytest.fixture(scope="module")
def shared_broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[EmbeddedBroker]:
    data: Path = tmp_path_factory.mktemp("dlq-enc") / "data"
    with EmbeddedBroker(data) as broker:
        yield broker


def _dead_letter(
    module: types.ModuleType, broker: EmbeddedBroker, keys: KeyPair, consumer_has_key: bool
) -> dict[str, Any]:
    """Send an encrypted poison message, negatively acknowledge it past the policy's maximum,
    and describe what the consumer saw and what the dead letter topic holds."""
    client = make_client(module, broker)
    topic = f"persistent://public/default/dlq-enc-{uuid.uuid4().hex[:12]}"
    key_reader = module.CryptoKeyReader(keys.public, keys.private)
    earliest = module.InitialPosition.Earliest
    try:
        without_key = client.subscribe(
            f"{topic}-s-DLQ",
            "no-key",
            initial_position=earliest,
            crypto_failure_action=module.ConsumerCryptoFailureAction.CONSUME,
        )
        with_key = client.subscribe(
            f"{topic}-s-DLQ", "key", initial_position=earliest, crypto_key_reader=key_reader
        )
        consumer = client.subscribe(
            topic,
            "s",
            consumer_type=module.ConsumerType.Shared,
            negative_ack_redelivery_delay_ms=100,
            dead_letter_policy=module.ConsumerDeadLetterPolicy(max_redeliver_count=1),
            initial_position=earliest,
            crypto_failure_action=module.ConsumerCryptoFailureAction.CONSUME,
            **({"crypto_key_reader": key_reader} if consumer_has_key else {}),
        )
        producer = client.create_producer(
            topic, encryption_key="app-key", crypto_key_reader=key_reader, batching_enabled=False
        )
        producer.send(b"poison", properties={"k": "v"}, partition_key="pk")
        seen = []
        for _ in range(2):  # redelivery counts 0 and 1, then the dead letter topic
            msg = consumer.receive(timeout_millis=10_000)
            seen.append((msg.data(), msg.encryption_context().is_decryption_failed()))
            consumer.negative_acknowledge(msg)
        dead = without_key.receive(timeout_millis=10_000)
        opened = with_key.receive(timeout_millis=10_000)
        props = dead.properties()
        return {
            "seen": seen,
            "dead": dead.data(),
            "dead_context": dead.encryption_context(),
            "with_key": (opened.data(), opened.encryption_context()),
            "key": dead.partition_key(),
            "props": (
                props.get("k"),
                props.get("REAL_TOPIC") == topic,
                "ORIGIN_MESSAGE_ID" in props,
            ),
        }
    finally:
        client.close()


def test_with_the_key_the_plaintext_is_dead_lettered(
    shared_broker: EmbeddedBroker, keys: KeyPair
) -> None:
    outcomes = [_dead_letter(m, shared_broker, keys, consumer_has_key=True) for m in MODULES]
    for out in outcomes:
        assert out["seen"] == [(b"poison", False)] * 2
        assert out["dead"] == b"poison"
        assert out["dead_context"] is None  # stored unencrypted
        assert out["with_key"] == (b"poison", None)
        assert out["key"] == "pk"
        assert out["props"] == ("v", True, True)
    assert outcomes[0] == outcomes[1]


def test_without_the_key_the_ciphertext_is_dead_lettered_as_plain_bytes(
    shared_broker: EmbeddedBroker, keys: KeyPair
) -> None:
    outcomes = [_dead_letter(m, shared_broker, keys, consumer_has_key=False) for m in MODULES]
    for out in outcomes:
        (cipher, failed), again = out["seen"]
        assert failed and cipher != b"poison" and again == (cipher, True)
        assert out["dead"] == cipher
        assert out["dead_context"] is None  # the encryption metadata is gone
        assert out["with_key"] == (cipher, None)  # so the key does not open it
        assert out["props"] == ("v", True, True)
    assert [out["props"] for out in outcomes] == [outcomes[0]["props"]] * 2


def _dead_batch(module: types.ModuleType, broker: EmbeddedBroker, keys: KeyPair) -> Any:
    """An encrypted batch of three that the consumer (no key, CONSUME) cannot open: what it
    receives and what is dead-lettered."""
    client = make_client(module, broker)
    topic = f"persistent://public/default/dlq-batch-{uuid.uuid4().hex[:12]}"
    consume = module.ConsumerCryptoFailureAction.CONSUME
    try:
        dlq = client.subscribe(
            f"{topic}-s-DLQ",
            "d",
            initial_position=module.InitialPosition.Earliest,
            crypto_failure_action=consume,
        )
        consumer = client.subscribe(
            topic,
            "s",
            consumer_type=module.ConsumerType.Shared,
            negative_ack_redelivery_delay_ms=100,
            dead_letter_policy=module.ConsumerDeadLetterPolicy(max_redeliver_count=1),
            initial_position=module.InitialPosition.Earliest,
            crypto_failure_action=consume,
        )
        producer = client.create_producer(
            topic,
            encryption_key="app-key",
            crypto_key_reader=module.CryptoKeyReader(keys.public, keys.private),
            batching_enabled=True,
            batching_max_publish_delay_ms=60_000,
        )
        for i in range(3):
            producer.send_async(f"m{i}".encode(), None, properties={"i": str(i)})
        producer.flush()
        seen = []
        for _ in range(2):
            msg = consumer.receive(timeout_millis=10_000)
            seen.append((msg.data(), msg.message_id().batch_index(), msg.redelivery_count()))
            consumer.negative_acknowledge(msg)
        dead = dlq.receive(timeout_millis=10_000)
        with pytest.raises(module.Timeout):
            dlq.receive(timeout_millis=300)
        cipher = seen[0][0]
        props = dead.properties()
        return (
            [(data == cipher, index, count) for data, index, count in seen],
            dead.data() == cipher,
            sorted(props),
            props["ORIGIN_MESSAGE_ID"].endswith(",-1,-1)"),
        )
    finally:
        client.close()


def test_an_encrypted_batch_the_consumer_cannot_open_is_one_dead_letter(
    shared_broker: EmbeddedBroker, keys: KeyPair
) -> None:
    outcomes = [_dead_batch(m, shared_broker, keys) for m in MODULES]
    assert outcomes[0] == (
        [(True, -1, 0), (True, -1, 1)],  # the whole batch, as one message
        True,
        ["ORIGIN_MESSAGE_ID", "REAL_TOPIC"],
        True,
    )
    assert outcomes[1] == outcomes[0]
