"""The public API of ``starquake.client`` against the installed official ``pulsar-client``:
every class and method the official modules (blocking and asyncio) offer exists in ours, and the
parameters a caller may pass by position come in the same order. The few things left out are
listed here, each with its reason; a new official name fails the test until it is built or
listed."""

from __future__ import annotations

import inspect
import types
import uuid
from typing import Any

import pulsar
import pulsar.asyncio
import pulsar.schema
import pytest

import starquake.client
import starquake.client.asyncio
import starquake.client.schema
from starquake.broker.embedded import EmbeddedBroker

PAIRS = [
    (pulsar, starquake.client),
    (pulsar.asyncio, starquake.client.asyncio),
    (pulsar.schema, starquake.client.schema),
]
IDS = ["blocking", "asyncio", "schema"]

# Official names we do not provide, and why.
NOT_PROVIDED = {
    # Pulsar Functions' runtime interfaces: they belong to a functions worker, not a client.
    "Function",
    "Context",
    "SerDe",
    "IdentitySerDe",
    "PickleSerDe",
    # Athenz and OAuth2 need their identity providers; token, basic and TLS are provided.
    "AuthenticationAthenz",
    "AuthenticationOauth2",
    # Internals of the C extension that the official modules re-export.
    "MessageBatch",
    "BatchReceivePolicy",
    "DeadLetterPolicyBuilder",
    "timedelta",
}
NOT_PROVIDED_METHODS = {
    ("ServiceInfo", "wrap"),  # wraps the C extension's own ServiceInfo object
    # how the official client hands itself to its schemas
    *(
        (name, "attach_client")
        for name in (
            "Schema",
            "BytesSchema",
            "StringSchema",
            "JsonSchema",
            "AvroSchema",
            "ProtobufNativeSchema",
        )
    ),
}
# The C extension's own policy object, which the official module re-exports; users build
# ``ConsumerKeySharedPolicy``, whose methods are compared.
EXTENSION_CLASSES = {"KeySharedPolicy"}

# Constructors the clients call themselves (users get these objects from the client).
INTERNAL_INIT = {
    "Client.__init__",  # compared below through its parameters, not as an internal
    "Consumer.__init__",
    "Producer.__init__",
    "Reader.__init__",
    "Message.__init__",
    "TableView.__init__",
    "EncryptionContext.__init__",
    "PulsarException.__init__",
}


def _positional(func: Any) -> list[str] | None:
    try:
        sig = inspect.signature(func)
    except (TypeError, ValueError):  # a C function without a signature
        return None
    kinds = (inspect.Parameter.POSITIONAL_ONLY, inspect.Parameter.POSITIONAL_OR_KEYWORD)
    return [p.name for p in sig.parameters.values() if p.kind in kinds]


def _public_classes(module: types.ModuleType) -> list[str]:
    return [
        name
        for name in dir(module)
        if not name.startswith("_") and inspect.isclass(getattr(module, name))
    ]


@pytest.mark.parametrize("official,ours", PAIRS, ids=IDS)
def test_every_official_class_and_method_exists(
    official: types.ModuleType, ours: types.ModuleType
) -> None:
    missing = []
    for cname in _public_classes(official):
        if cname in NOT_PROVIDED:
            continue
        if not hasattr(ours, cname):
            missing.append(cname)
            continue
        if cname in EXTENSION_CLASSES:
            continue
        for mname, _ in inspect.getmembers(getattr(official, cname), callable):
            if mname.startswith("_") or (cname, mname) in NOT_PROVIDED_METHODS:
                continue
            if not hasattr(getattr(ours, cname), mname):
                missing.append(f"{cname}.{mname}")
    assert missing == []


@pytest.mark.parametrize("official,ours", PAIRS, ids=IDS)
def test_positional_parameters_come_in_the_official_order(
    official: types.ModuleType, ours: types.ModuleType
) -> None:
    wrong = []
    for cname in _public_classes(official):
        if cname in NOT_PROVIDED | EXTENSION_CLASSES or not hasattr(ours, cname):
            continue
        for mname, method in inspect.getmembers(getattr(official, cname), callable):
            if mname.startswith("_") and mname != "__init__":
                continue
            if f"{cname}.{mname}" in INTERNAL_INIT - {"Client.__init__"}:
                continue
            theirs = _positional(method)
            mine = _positional(getattr(getattr(ours, cname), mname, None))
            if theirs is None or mine is None:
                continue
            if mine[: len(theirs)] != theirs:
                wrong.append((cname, mname, theirs, mine))
    assert wrong == []


def test_subscribe_takes_the_official_arguments_by_position(
    client: Any, mod: Any, broker: EmbeddedBroker
) -> None:
    topic = f"persistent://public/default/pos-{uuid.uuid4().hex[:8]}"
    # topic, subscription, type, schema, listener, receiver_queue_size,
    # max_total_receiver_queue_size_across_partitions, consumer_name
    schema = mod.schema.BytesSchema()
    consumer = client.subscribe(topic, "sub", mod.ConsumerType.Shared, schema, None, 10, 500, "me")
    assert consumer.consumer_name() == "me"
    consumer.close()


def test_create_reader_takes_the_official_arguments_by_position(
    client: Any, mod: Any, broker: EmbeddedBroker
) -> None:
    topic = f"persistent://public/default/pos-{uuid.uuid4().hex[:8]}"
    producer = client.create_producer(topic)
    producer.send(b"only")
    # topic, start, schema, listener, receiver_queue_size, reader_name,
    # subscription_role_prefix, is_read_compacted, crypto_key_reader,
    # start_message_id_inclusive
    schema = mod.schema.BytesSchema()
    reader = client.create_reader(
        topic, mod.MessageId.latest, schema, None, 10, None, None, False, None, True
    )
    # start_message_id_inclusive (the tenth) took effect: the last message is there
    assert reader.has_message_available()
    assert reader.read_next(5000).data() == b"only"
    reader.close()
    producer.close()


def test_too_many_positional_arguments_is_a_type_error(
    client: Any, mod: Any, broker: EmbeddedBroker
) -> None:
    topic = f"persistent://public/default/pos-{uuid.uuid4().hex[:8]}"
    with pytest.raises(TypeError):
        client.create_reader(topic, mod.MessageId.latest, mod.schema.BytesSchema(), *([None] * 12))
