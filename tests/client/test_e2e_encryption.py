"""End-to-end encryption: each client decrypts what the other encrypts, the failure actions
behave the same, and the broker never stores the plaintext."""

from __future__ import annotations

import asyncio
import os
import time
import types
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pulsar
import pytest
from crypto_keys import KeyPair, ec_pair, open_payload, rsa_pair
from official_client import make_client, receive_count

import starquake.client as sq
from starquake.broker.embedded import EmbeddedBroker
from starquake.client import asyncio as sqa
from starquake.client.crypto import _crypto

PLAIN = b"top-secret-plaintext-"


@pytest.fixture(scope="module")
def keys(tmp_path_factory: pytest.TempPathFactory) -> KeyPair:
    return rsa_pair(tmp_path_factory.mktemp("keys"), "good")


@pytest.fixture(scope="module")
def other_keys(tmp_path_factory: pytest.TempPathFactory) -> KeyPair:
    return rsa_pair(tmp_path_factory.mktemp("other"), "other", traditional=True)


def _topic() -> str:
    return f"persistent://public/default/e2e-{uuid.uuid4().hex[:12]}"


def _reader(module: types.ModuleType, pair: KeyPair) -> Any:
    return module.CryptoKeyReader(pair.public, pair.private)


def _context(msg: Any) -> tuple[Any, ...] | None:
    """What an encryption context says, comparable across the two clients."""
    ctx = msg.encryption_context()
    if ctx is None:
        return None
    keys = [(k.key, len(k.value), k.metadata) for k in list(ctx.keys())]
    return (
        keys,
        len(ctx.param()),
        ctx.algorithm(),
        ctx.compression_type().name,
        ctx.uncompressed_message_size(),
        ctx.batch_size(),
        ctx.is_decryption_failed(),
    )


def _produce(
    producer_client: Any,
    module: types.ModuleType,
    topic: str,
    pair: KeyPair,
    count: int,
    **kwargs: Any,
) -> list[bytes]:
    if kwargs.get("batching_enabled"):
        # one batch however slowly the sends come: only the flush sends it
        kwargs.setdefault("batching_max_publish_delay_ms", 60_000)
    producer = producer_client.create_producer(
        topic,
        encryption_key="app-key",
        crypto_key_reader=_reader(module, pair),
        block_if_queue_full=True,
        **kwargs,
    )
    payloads = [PLAIN + b"%d" % i for i in range(count)]
    for p in payloads:
        producer.send_async(p, None)
    producer.flush()
    producer.close()
    return payloads


@pytest.fixture
def both(broker: EmbeddedBroker) -> Iterator[dict[str, Any]]:
    clients = {"official": make_client(pulsar, broker), "starquake": make_client(sq, broker)}
    try:
        yield clients
    finally:
        for c in clients.values():
            c.close()


MODULES = {"official": pulsar, "starquake": sq}


@pytest.mark.parametrize("producer_side", ["official", "starquake"])
@pytest.mark.parametrize("batching", [False, True])
@pytest.mark.parametrize("compression", ["NONE", "LZ4", "ZSTD"])
def test_each_client_decrypts_what_either_encrypts(
    both: dict[str, Any], keys: KeyPair, producer_side: str, batching: bool, compression: str
) -> None:
    topic = _topic()
    consumers = {
        side: both[side].subscribe(
            topic, f"sub-{side}", crypto_key_reader=_reader(MODULES[side], keys)
        )
        for side in both
    }
    module = MODULES[producer_side]
    sent = _produce(
        both[producer_side],
        module,
        topic,
        keys,
        5,
        batching_enabled=batching,
        compression_type=getattr(module.CompressionType, compression),
    )
    got = {
        side: receive_count(c, len(sent), 5000, acknowledge=True) for side, c in consumers.items()
    }
    for side, msgs in got.items():
        assert [m.data() for m in msgs] == sent, side
    contexts = {side: [_context(m) for m in msgs] for side, msgs in got.items()}
    assert contexts["starquake"] == contexts["official"]
    first = contexts["official"][0]
    assert first is not None
    assert first[0] == [("app-key", 256, {})]
    assert first[1] == 12
    assert first[6] is False
    assert first[5] == (5 if batching else -1)


def _stored_bytes(directory: Path) -> bytes:
    data = bytearray()
    for root, _dirs, files in os.walk(directory):
        for name in files:
            with open(os.path.join(root, name), "rb") as f:
                data += f.read()
    return bytes(data)


@pytest.mark.parametrize("batching", [False, True])
def test_the_broker_never_stores_the_plaintext(
    broker: EmbeddedBroker, keys: KeyPair, batching: bool, tmp_path: Path
) -> None:
    topic = _topic()
    ours = make_client(sq, broker)
    consumer = ours.subscribe(topic, "sub", crypto_key_reader=_reader(sq, keys))
    marker = b"plain-marker-" + uuid.uuid4().hex.encode()
    control = b"control-marker-" + uuid.uuid4().hex.encode()
    producer = ours.create_producer(
        topic,
        encryption_key="app-key",
        crypto_key_reader=_reader(sq, keys),
        batching_enabled=batching,
    )
    producer.send(marker)
    plain_producer = ours.create_producer(topic, batching_enabled=batching)
    plain_producer.send(control)
    msgs = receive_count(consumer, 2, 5000, acknowledge=True)
    assert [m.data() for m in msgs] == [marker, control]
    assert msgs[0].encryption_context() is not None
    assert msgs[1].encryption_context() is None
    producer.close()
    plain_producer.close()
    ours.close()
    broker.stop()
    stored = _stored_bytes(tmp_path / "data")
    assert control in stored  # the storage keeps payloads as sent: the check can fail
    assert marker not in stored


@pytest.mark.parametrize("side", ["official", "starquake"])
@pytest.mark.parametrize("batching", [False, True])
def test_consume_delivers_the_encrypted_payload_with_its_context(
    both: dict[str, Any], keys: KeyPair, side: str, batching: bool
) -> None:
    topic = _topic()
    module = MODULES[side]
    consumer = both[side].subscribe(
        topic, "sub", crypto_failure_action=module.ConsumerCryptoFailureAction.CONSUME
    )
    sent = _produce(both["starquake"], sq, topic, keys, 3, batching_enabled=batching)
    msg = consumer.receive(5000)
    ctx = msg.encryption_context()
    assert ctx is not None and ctx.is_decryption_failed()
    assert PLAIN not in msg.data()
    assert ctx.batch_size() == (3 if batching else -1)
    opened = open_payload(ctx, msg.data(), keys.private)
    if batching:
        assert all(p in opened for p in sent)  # the whole batch, encrypted as one
    else:
        assert opened == sent[0]
        rest = [consumer.receive(5000) for _ in range(2)]
        assert [open_payload(m.encryption_context(), m.data(), keys.private) for m in rest] == sent[
            1:
        ]
    with pytest.raises(module.Timeout):
        consumer.receive(300)


@pytest.mark.parametrize("side", ["official", "starquake"])
def test_consume_with_a_wrong_private_key(
    both: dict[str, Any], keys: KeyPair, other_keys: KeyPair, side: str
) -> None:
    topic = _topic()
    module = MODULES[side]
    consumer = both[side].subscribe(
        topic,
        "sub",
        crypto_key_reader=_reader(module, other_keys),
        crypto_failure_action=module.ConsumerCryptoFailureAction.CONSUME,
    )
    sent = _produce(both["official"], pulsar, topic, keys, 1)
    msg = consumer.receive(5000)
    assert msg.data() != sent[0]
    assert msg.encryption_context().is_decryption_failed()
    assert open_payload(msg.encryption_context(), msg.data(), keys.private) == sent[0]


@pytest.mark.parametrize("side", ["official", "starquake"])
@pytest.mark.parametrize("action", ["FAIL", "DISCARD"])
def test_fail_and_discard_deliver_nothing(
    both: dict[str, Any], keys: KeyPair, side: str, action: str
) -> None:
    """FAIL leaves the message for a consumer that can decrypt it, DISCARD acknowledges it."""
    topic = _topic()
    module = MODULES[side]
    consumer = both[side].subscribe(
        topic, "sub", crypto_failure_action=getattr(module.ConsumerCryptoFailureAction, action)
    )
    sent = _produce(both["starquake"], sq, topic, keys, 2)
    with pytest.raises(module.Timeout):
        consumer.receive(1000)
    consumer.close()
    again = both[side].subscribe(topic, "sub", crypto_key_reader=_reader(module, keys))
    if action == "FAIL":
        assert [m.data() for m in receive_count(again, 2, 5000, acknowledge=True)] == sent
    else:
        with pytest.raises(module.Timeout):
            again.receive(1000)


@pytest.mark.parametrize("side", ["official", "starquake"])
def test_reader_decrypts(both: dict[str, Any], keys: KeyPair, side: str) -> None:
    topic = _topic()
    module = MODULES[side]
    sent = _produce(both["official"], pulsar, topic, keys, 3, batching_enabled=True)
    reader = both[side].create_reader(
        topic, module.MessageId.earliest, crypto_key_reader=_reader(module, keys)
    )
    assert [reader.read_next(5000).data() for _ in sent] == sent
    reader.close()


@pytest.mark.parametrize("producer_side", ["official", "starquake"])
def test_chunked_encrypted_messages(
    small_broker: EmbeddedBroker, keys: KeyPair, producer_side: str
) -> None:
    clients = {
        "official": make_client(pulsar, small_broker),
        "starquake": make_client(sq, small_broker),
    }
    try:
        topic = _topic()
        consumers = {
            side: clients[side].subscribe(
                topic, f"sub-{side}", crypto_key_reader=_reader(MODULES[side], keys)
            )
            for side in clients
        }
        module = MODULES[producer_side]
        producer = clients[producer_side].create_producer(
            topic,
            encryption_key="app-key",
            crypto_key_reader=_reader(module, keys),
            batching_enabled=False,
            chunking_enabled=True,
        )
        big = PLAIN + os.urandom(35_000)
        producer.send(big)
        producer.send(b"small")
        for side, consumer in consumers.items():
            msgs = receive_count(consumer, 2, 5000, acknowledge=True)
            assert [m.data() for m in msgs] == [big, b"small"], side
            assert msgs[0].encryption_context() is not None
    finally:
        for c in clients.values():
            c.close()


def test_data_key_rotation(
    both: dict[str, Any], keys: KeyPair, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A producer renews its data key when it expires; every message stays readable."""
    monkeypatch.setattr(_crypto, "DATA_KEY_LIFETIME_SECONDS", 0.0)  # a new key every message
    topic = _topic()
    consumers = [
        both[side].subscribe(topic, "sub-" + side, crypto_key_reader=_reader(MODULES[side], keys))
        for side in both
    ]
    producer = both["starquake"].create_producer(
        topic, encryption_key="app-key", crypto_key_reader=_reader(sq, keys)
    )
    sent = [PLAIN + b"%d" % i for i in range(3)]
    for p in sent:
        producer.send(p)
    for consumer in consumers:
        msgs = receive_count(consumer, 3, 5000, acknowledge=True)
        assert [m.data() for m in msgs] == sent
        wrapped = {m.encryption_context().keys()[0].value for m in msgs}
        assert len(wrapped) == 3
    producer.close()


@pytest.mark.parametrize("producer_side", ["official", "starquake"])
@pytest.mark.parametrize("batching", [False, True])
def test_consume_gives_both_clients_the_same_ciphertext_and_context(
    both: dict[str, Any], keys: KeyPair, producer_side: str, batching: bool
) -> None:
    topic = _topic()
    consumers = {
        side: both[side].subscribe(
            topic,
            "sub-" + side,
            crypto_failure_action=MODULES[side].ConsumerCryptoFailureAction.CONSUME,
        )
        for side in both
    }
    module = MODULES[producer_side]
    sent = _produce(
        both[producer_side],
        module,
        topic,
        keys,
        2,
        batching_enabled=batching,
        compression_type=module.CompressionType.LZ4,
    )
    count = 1 if batching else len(sent)
    got = {side: receive_count(c, count, 5000, acknowledge=True) for side, c in consumers.items()}
    assert [m.data() for m in got["starquake"]] == [m.data() for m in got["official"]]
    assert [_context(m) for m in got["starquake"]] == [_context(m) for m in got["official"]]
    ctx = got["starquake"][0].encryption_context()
    assert ctx.compression_type() == sq.CompressionType.LZ4
    assert ctx.uncompressed_message_size() > 0


def test_asyncio_api(broker: EmbeddedBroker, keys: KeyPair) -> None:
    async def scenario() -> list[bytes]:
        client = sqa.Client(broker.service_url)
        try:
            topic = _topic()
            consumer = await client.subscribe(
                topic, "sub", crypto_key_reader=sq.CryptoKeyReader(keys.public, keys.private)
            )
            producer = await client.create_producer(
                topic,
                encryption_key="app-key",
                crypto_key_reader=sq.CryptoKeyReader(keys.public, keys.private),
            )
            await producer.send(PLAIN)
            msg = await consumer.receive()
            assert msg.encryption_context() is not None
            return [msg.data()]
        finally:
            await client.close()

    assert asyncio.run(scenario()) == [PLAIN]


@pytest.mark.parametrize("side", ["official", "starquake"])
def test_argument_errors(both: dict[str, Any], side: str, keys: KeyPair) -> None:
    module = MODULES[side]
    with pytest.raises(ValueError):
        module.CryptoKeyReader(1, keys.private)
    with pytest.raises(ValueError):
        module.CryptoKeyReader(keys.public, None)
    client = both[side]
    with pytest.raises(ValueError):
        client.create_producer(_topic(), encryption_key=5, crypto_key_reader=_reader(module, keys))
    with pytest.raises(ValueError):
        client.create_producer(_topic(), encryption_key="k", crypto_key_reader="reader")
    with pytest.raises(ValueError):
        client.subscribe(_topic(), "s", crypto_key_reader="reader")
    with pytest.raises(ValueError):
        client.subscribe(_topic(), "s", crypto_failure_action="FAIL")


@pytest.mark.parametrize("side", ["official", "starquake"])
def test_a_producer_with_an_unusable_public_key(
    both: dict[str, Any], tmp_path: Path, side: str
) -> None:
    """The producer is created, its sends fail with CryptoError: a key file that is not
    there, and (official client only: it reads RSA keys only) an EC key."""
    module = MODULES[side]
    missing = KeyPair(str(tmp_path / "missing.pem"), str(tmp_path / "missing.pem"))
    unusable = [_reader(module, missing)]
    if side == "official":
        unusable.append(_reader(module, ec_pair(tmp_path, "ec")))
    for reader in unusable:
        for batching in (False, True):
            producer = both[side].create_producer(
                _topic(), encryption_key="k", crypto_key_reader=reader, batching_enabled=batching
            )
            with pytest.raises(module.CryptoError):
                producer.send(b"x")
            results: list[Any] = []
            producer.send_async(b"y", lambda res, _mid, out=results: out.append(res))
            if not batching:
                producer.flush()
            deadline = time.monotonic() + 5
            while not results and time.monotonic() < deadline:
                time.sleep(0.05)
            assert [str(r).rsplit(".", 1)[-1] for r in results] == ["CryptoError"]


@pytest.mark.parametrize("producer_side", ["official", "starquake"])
def test_partitioned_topic(
    broker: EmbeddedBroker, both: dict[str, Any], keys: KeyPair, producer_side: str
) -> None:
    topic = _topic()
    broker.create_partitioned_topic(topic, 3)
    consumers = {
        side: both[side].subscribe(
            topic, "sub-" + side, crypto_key_reader=_reader(MODULES[side], keys)
        )
        for side in both
    }
    module = MODULES[producer_side]
    sent = _produce(
        both[producer_side],
        module,
        topic,
        keys,
        9,
        batching_enabled=False,
        message_routing_mode=module.PartitionsRoutingMode.RoundRobinDistribution,
    )
    for side, consumer in consumers.items():
        assert (
            sorted(m.data() for m in receive_count(consumer, len(sent), 5000, acknowledge=True))
            == sent
        ), side
