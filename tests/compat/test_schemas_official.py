"""The schema registry driven by the official client: typed round trips, versions, evolution,
compatibility strategies and refusals."""

from __future__ import annotations

import json
import struct
import uuid
from pathlib import Path

import pulsar
import pytest
from admin_http import admin_json
from google.protobuf import descriptor_pb2, descriptor_pool, message_factory
from pulsar.schema import (
    AvroSchema,
    Integer,
    JsonSchema,
    ProtobufNativeSchema,
    Record,
    String,
    StringSchema,
)

from starquake.broker.embedded import EmbeddedBroker

NS = "/admin/v2/namespaces/public/default"


class User(Record):
    name = String()
    age = Integer()


def _user_v1() -> type[Record]:
    class User(Record):
        _avro_namespace = "test"
        name = String()

    return User


def _user_v2() -> type[Record]:
    """Version 2 adds a field with a default: the same record name, so Avro resolves them."""

    class User(Record):
        _avro_namespace = "test"
        name = String()
        email = String(default=None, required_default=True)

    return User


def _user_required_email() -> type[Record]:
    """Adds a field without a default: not backward compatible with version 1."""

    class User(Record):
        _avro_namespace = "test"
        name = String()
        email = String(required=True)

    return User


UserV1 = _user_v1()
UserV2 = _user_v2()
UserRequiredEmail = _user_required_email()


def _short(topic: str) -> str:
    return topic.rsplit("/", 1)[1]


def _version(n: int) -> bytes:
    return struct.pack(">q", n)


def _set_strategy(broker: EmbeddedBroker, strategy: str) -> None:
    status, _ = admin_json(broker, "PUT", f"{NS}/schemaCompatibilityStrategy", strategy)
    assert status == 204


def test_string_round_trip_and_version(
    broker: EmbeddedBroker, client: pulsar.Client, topic: str
) -> None:
    consumer = client.subscribe(topic, "s", schema=StringSchema())
    producer = client.create_producer(topic, schema=StringSchema())
    producer.send("héllo")
    msg = consumer.receive(timeout_millis=5000)
    assert msg.value() == "héllo"
    assert isinstance(msg.value(), str)
    # the official client hands the 8 version bytes over as a str
    assert msg.schema_version() == _version(0).decode()
    status, body = admin_json(
        broker, "GET", f"/admin/v2/schemas/public/default/{_short(topic)}/schema"
    )
    assert status == 200
    assert body["type"] == "STRING" and body["version"] == 0


def test_json_record_round_trip(broker: EmbeddedBroker, client: pulsar.Client, topic: str) -> None:
    consumer = client.subscribe(topic, "s", schema=JsonSchema(User))
    producer = client.create_producer(topic, schema=JsonSchema(User))
    producer.send(User(name="ann", age=41))
    value = consumer.receive(timeout_millis=5000).value()
    assert (value.name, value.age) == ("ann", 41)
    status, body = admin_json(
        broker, "GET", f"/admin/v2/schemas/public/default/{_short(topic)}/schema"
    )
    assert status == 200 and body["type"] == "JSON"
    assert json.loads(body["data"])["name"] == "User"


def test_avro_record_round_trip(client: pulsar.Client, topic: str) -> None:
    consumer = client.subscribe(topic, "s", schema=AvroSchema(User))
    producer = client.create_producer(topic, schema=AvroSchema(User))
    for i in range(5):
        producer.send(User(name=f"u{i}", age=i))
    got = [consumer.receive(timeout_millis=5000).value() for _ in range(5)]
    assert [(u.name, u.age) for u in got] == [(f"u{i}", i) for i in range(5)]


def _point_class() -> type:
    file = descriptor_pb2.FileDescriptorProto(name="sq_point.proto", package="sqtest")
    message = file.message_type.add(name="Point")
    message.field.add(name="x", number=1, type=descriptor_pb2.FieldDescriptorProto.TYPE_INT64)
    message.field.add(name="label", number=2, type=descriptor_pb2.FieldDescriptorProto.TYPE_STRING)
    pool = descriptor_pool.DescriptorPool()
    pool.Add(file)
    return message_factory.GetMessageClass(pool.FindMessageTypeByName("sqtest.Point"))


def test_protobuf_native_round_trip(
    broker: EmbeddedBroker, client: pulsar.Client, topic: str
) -> None:
    point = _point_class()
    consumer = client.subscribe(topic, "s", schema=ProtobufNativeSchema(point))
    producer = client.create_producer(topic, schema=ProtobufNativeSchema(point))
    producer.send(point(x=7, label="seven"))
    value = consumer.receive(timeout_millis=5000).value()
    assert (value.x, value.label) == (7, "seven")
    status, body = admin_json(
        broker, "GET", f"/admin/v2/schemas/public/default/{_short(topic)}/schema"
    )
    assert status == 200 and body["type"] == "PROTOBUF_NATIVE"
    assert "sqtest.Point" in body["data"]


def test_consumer_with_another_type_is_refused(client: pulsar.Client, topic: str) -> None:
    client.create_producer(topic, schema=AvroSchema(User))
    with pytest.raises(pulsar.IncompatibleSchema):
        client.subscribe(topic, "s", schema=StringSchema())
    # a bytes consumer reads anything
    client.subscribe(topic, "raw").close()


def test_producer_with_another_type_is_refused(client: pulsar.Client, topic: str) -> None:
    client.create_producer(topic, schema=JsonSchema(User))
    with pytest.raises(pulsar.IncompatibleSchema):
        client.create_producer(topic, schema=StringSchema())


def test_backward_refuses_a_field_without_default_always_compatible_accepts(
    broker: EmbeddedBroker, client: pulsar.Client, topic: str
) -> None:
    _set_strategy(broker, "BACKWARD")
    client.create_producer(topic, schema=AvroSchema(UserV1)).close()
    with pytest.raises(pulsar.IncompatibleSchema):
        client.create_producer(topic, schema=AvroSchema(UserRequiredEmail))
    status, body = admin_json(
        broker, "GET", f"/admin/v2/schemas/public/default/{_short(topic)}/versions"
    )
    assert status == 200 and len(body["getSchemaResponses"]) == 1
    _set_strategy(broker, "ALWAYS_COMPATIBLE")
    producer = client.create_producer(topic, schema=AvroSchema(UserRequiredEmail))
    producer.send(UserRequiredEmail(name="x", email="e"))
    status, body = admin_json(
        broker, "GET", f"/admin/v2/schemas/public/default/{_short(topic)}/versions"
    )
    assert [v["version"] for v in body["getSchemaResponses"]] == [0, 1]


def test_evolution_old_and_new_consumers_decode_both_versions(
    broker: EmbeddedBroker, client: pulsar.Client, topic: str
) -> None:
    _set_strategy(broker, "BACKWARD")
    old_consumer = client.subscribe(topic, "old", schema=AvroSchema(UserV1))
    p1 = client.create_producer(topic, schema=AvroSchema(UserV1))
    p1.send(UserV1(name="first"))
    p2 = client.create_producer(topic, schema=AvroSchema(UserV2))
    p2.send(UserV2(name="second", email="s@example.org"))
    new_consumer = client.subscribe(
        topic, "new", schema=AvroSchema(UserV2), initial_position=pulsar.InitialPosition.Earliest
    )

    first, second = (old_consumer.receive(timeout_millis=5000) for _ in range(2))
    assert (first.schema_version(), second.schema_version()) == (
        _version(0).decode(),
        _version(1).decode(),
    )
    assert first.value().name == "first"
    assert second.value().name == "second"  # v2 data read with the v1 reader schema

    first, second = (new_consumer.receive(timeout_millis=5000) for _ in range(2))
    assert (first.value().name, first.value().email) == ("first", None)  # the default
    assert (second.value().name, second.value().email) == ("second", "s@example.org")


def test_schema_validation_enforced_refuses_bytes_producers(
    broker: EmbeddedBroker, client: pulsar.Client, topic: str
) -> None:
    client.create_producer(topic, schema=StringSchema()).close()
    client.create_producer(topic).close()  # not enforced: bytes producers are let in
    status, _ = admin_json(broker, "POST", f"{NS}/schemaValidationEnforced", True)
    assert status == 204
    with pytest.raises(pulsar.IncompatibleSchema):
        client.create_producer(topic)


def test_auto_update_disabled_refuses_new_versions_but_not_existing_ones(
    broker: EmbeddedBroker, client: pulsar.Client, topic: str
) -> None:
    client.create_producer(topic, schema=AvroSchema(UserV1)).close()
    status, _ = admin_json(broker, "POST", f"{NS}/isAllowAutoUpdateSchema", False)
    assert status == 204
    client.create_producer(topic, schema=AvroSchema(UserV1)).close()
    with pytest.raises(pulsar.IncompatibleSchema):
        client.create_producer(topic, schema=AvroSchema(UserV2))


def test_schemas_survive_a_restart(tmp_path: Path, topic: str) -> None:
    data = tmp_path / "data"
    with EmbeddedBroker(data) as broker:
        c = pulsar.Client(
            broker.service_url,
            operation_timeout_seconds=10,
            logger=pulsar.ConsoleLogger(pulsar.LoggerLevel.Error),
        )
        c.create_producer(topic, schema=AvroSchema(UserV1)).send(UserV1(name="a"))
        c.create_producer(topic, schema=AvroSchema(UserV2)).send(UserV2(name="b"))
        c.close()
    with EmbeddedBroker(data) as broker:
        status, body = admin_json(
            broker, "GET", f"/admin/v2/schemas/public/default/{_short(topic)}/versions"
        )
        assert status == 200 and [v["version"] for v in body["getSchemaResponses"]] == [0, 1]
        c = pulsar.Client(
            broker.service_url,
            operation_timeout_seconds=10,
            logger=pulsar.ConsoleLogger(pulsar.LoggerLevel.Error),
        )
        # the same v1 schema gets its old version back, not a new one
        producer = c.create_producer(topic, schema=AvroSchema(UserV1))
        producer.send(UserV1(name="c"))
        consumer = c.subscribe(
            topic,
            "after",
            schema=AvroSchema(UserV2),
            initial_position=pulsar.InitialPosition.Earliest,
        )
        got = [consumer.receive(timeout_millis=5000) for _ in range(3)]
        assert [m.value().name for m in got] == ["a", "b", "c"]
        assert got[0].schema_version() == got[2].schema_version()
        c.close()


def test_registered_versions_survive_kill_9(tmp_path: Path) -> None:
    """A producer that got its schema version, and an upload that got its answer, were stored
    first: a broker killed with SIGKILL comes back with both versions and the deletion."""
    from admin_http import http_call
    from broker_process import BrokerProcess

    broker = BrokerProcess(tmp_path / "data")
    broker.start()
    web = f"http://127.0.0.1:{broker.web_port}"
    try:
        name = f"k9-{uuid.uuid4().hex[:8]}"
        topic = f"persistent://public/default/{name}"
        c = pulsar.Client(broker.url, operation_timeout_seconds=10)
        try:
            c.create_producer(topic, schema=AvroSchema(UserV1)).send(UserV1(name="a"))
            c.create_producer(topic, schema=AvroSchema(UserV2)).send(UserV2(name="b"))
            c.create_producer(f"{topic}-untyped").send(b"raw")  # a topic with no schema yet
        finally:
            c.close()
        other = f"/admin/v2/schemas/public/default/{name}-rest"
        upload = {"type": "STRING", "schema": ""}
        assert http_call(web, "POST", f"{other}/schema", upload)[0] == 200
        assert http_call(web, "DELETE", f"{other}/schema")[0] == 200
        broker.kill()
        broker.start()
        status, raw = http_call(web, "GET", f"/admin/v2/schemas/public/default/{name}/versions")
        assert status == 200
        assert [v["version"] for v in json.loads(raw)["getSchemaResponses"]] == [0, 1]
        assert http_call(web, "GET", f"{other}/schema")[0] == 404
        assert http_call(web, "GET", f"{other}/schema/0")[0] == 200
        untyped = f"/admin/v2/schemas/public/default/{name}-untyped/schema"
        assert http_call(web, "GET", untyped)[0] == 404
        c = pulsar.Client(broker.url, operation_timeout_seconds=10)
        try:
            # still no schema, and holding data: a typed consumer has nothing to check against
            with pytest.raises(pulsar.IncompatibleSchema):
                c.subscribe(f"{topic}-untyped", "typed", schema=StringSchema())
            consumer = c.subscribe(
                topic,
                "s",
                schema=AvroSchema(UserV2),
                initial_position=pulsar.InitialPosition.Earliest,
            )
            assert [consumer.receive(10000).value().name for _ in range(2)] == ["a", "b"]
        finally:
            c.close()
    finally:
        broker.stop()
