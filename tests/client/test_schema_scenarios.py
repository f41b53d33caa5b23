"""Typed topics with both clients (each scenario runs with the official client and with ours),
and across them: one client produces, the other decodes."""

from __future__ import annotations

import asyncio
import struct
import types
import uuid
from typing import Any

import pulsar
import pytest
from admin_http import admin_json
from official_client import make_client

import starquake.client
import starquake.client.asyncio as sq_asyncio
from starquake.broker.embedded import EmbeddedBroker

NS = "/admin/v2/namespaces/public/default"


def _user_classes(mod: types.ModuleType) -> tuple[type, type]:
    """Version 1 and version 2 (one more field, with a default) of the record ``User``."""
    schema = mod.schema

    def v1() -> type:
        class User(schema.Record):
            _avro_namespace = "test"
            name = schema.String()
            age = schema.Integer()

        return User

    def v2() -> type:
        class User(schema.Record):
            _avro_namespace = "test"
            name = schema.String()
            age = schema.Integer()
            email = schema.String(default=None, required_default=True)

        return User

    return v1(), v2()


def _version_bytes(mod: types.ModuleType, msg: Any) -> bytes:
    raw = msg.schema_version()
    assert isinstance(raw, str)
    return raw.encode("latin-1")


def test_typed_round_trips(mod: types.ModuleType, client: Any, topic: str) -> None:
    schema = mod.schema
    user, _ = _user_classes(mod)
    for kind, value in (
        (schema.StringSchema(), "snow ❄"),
        (schema.JsonSchema(user), user(name="ann", age=3)),
        (schema.AvroSchema(user), user(name="bob", age=4)),
    ):
        name = f"{topic}-{type(kind).__name__}"
        consumer = client.subscribe(name, "s", schema=kind)
        producer = client.create_producer(name, schema=kind)
        producer.send(value)
        msg = consumer.receive(timeout_millis=5000)
        assert msg.value() == value
        assert _version_bytes(mod, msg) == struct.pack(">q", 0)
        consumer.close()
        producer.close()


def test_incompatible_consumer_is_refused(mod: types.ModuleType, client: Any, topic: str) -> None:
    user, _ = _user_classes(mod)
    client.create_producer(topic, schema=mod.schema.AvroSchema(user))
    with pytest.raises(mod.IncompatibleSchema):
        client.subscribe(topic, "s", schema=mod.schema.StringSchema())
    with pytest.raises(mod.IncompatibleSchema):
        client.subscribe(topic, "j", schema=mod.schema.JsonSchema(user))


def test_evolution_both_readers_decode_both_versions(
    mod: types.ModuleType, broker: EmbeddedBroker, client: Any, topic: str
) -> None:
    admin_json(broker, "PUT", f"{NS}/schemaCompatibilityStrategy", "BACKWARD")
    v1, v2 = _user_classes(mod)
    old = client.subscribe(topic, "old", schema=mod.schema.AvroSchema(v1))
    new = client.subscribe(topic, "new", schema=mod.schema.AvroSchema(v2))
    client.create_producer(topic, schema=mod.schema.AvroSchema(v1)).send(v1(name="a", age=1))
    client.create_producer(topic, schema=mod.schema.AvroSchema(v2)).send(
        v2(name="b", age=2, email="b@example.org")
    )
    got_old = [old.receive(timeout_millis=5000) for _ in range(2)]
    got_new = [new.receive(timeout_millis=5000) for _ in range(2)]
    assert [_version_bytes(mod, m) for m in got_old] == [struct.pack(">q", v) for v in (0, 1)]
    assert [(u.value().name, u.value().age) for u in got_old] == [("a", 1), ("b", 2)]
    assert [(u.value().name, u.value().email) for u in got_new] == [
        ("a", None),
        ("b", "b@example.org"),
    ]


@pytest.mark.parametrize("direction", ["starquake->official", "official->starquake"])
@pytest.mark.parametrize("kind", ["AvroSchema", "JsonSchema"])
def test_cross_client(broker: EmbeddedBroker, topic: str, direction: str, kind: str) -> None:
    sq = make_client(starquake.client, broker)
    official = make_client(pulsar, broker)
    try:
        writer_mod, reader_mod = (
            (starquake.client, pulsar)
            if direction.startswith("starquake")
            else (pulsar, starquake.client)
        )
        writer_client, reader_client = (
            (sq, official) if writer_mod is starquake.client else (official, sq)
        )
        w_user, _ = _user_classes(writer_mod)
        r_user, _ = _user_classes(reader_mod)
        consumer = reader_client.subscribe(
            topic, "s", schema=getattr(reader_mod.schema, kind)(r_user)
        )
        producer = writer_client.create_producer(
            topic, schema=getattr(writer_mod.schema, kind)(w_user)
        )
        for i in range(3):
            producer.send(w_user(name=f"n{i}", age=i))
        got = [consumer.receive(timeout_millis=5000).value() for _ in range(3)]
        assert [(u.name, u.age) for u in got] == [(f"n{i}", i) for i in range(3)]
        # both clients declare byte-identical definitions: one version only
        status, body = admin_json(
            broker, "GET", f"/admin/v2/schemas/public/default/{topic.rsplit('/', 1)[1]}/versions"
        )
        assert status == 200 and len(body["getSchemaResponses"]) == 1
    finally:
        sq.close()
        official.close()


def test_cross_client_evolution_official_v2_writer_ours_v1_and_v2_readers(
    broker: EmbeddedBroker, topic: str
) -> None:
    admin_json(broker, "PUT", f"{NS}/schemaCompatibilityStrategy", "FULL")
    sq = make_client(starquake.client, broker)
    official = make_client(pulsar, broker)
    try:
        o1, o2 = _user_classes(pulsar)
        s1, s2 = _user_classes(starquake.client)
        r1 = sq.subscribe(topic, "r1", schema=starquake.client.schema.AvroSchema(s1))
        r2 = sq.subscribe(topic, "r2", schema=starquake.client.schema.AvroSchema(s2))
        official.create_producer(topic, schema=pulsar.schema.AvroSchema(o1)).send(
            o1(name="x", age=1)
        )
        official.create_producer(topic, schema=pulsar.schema.AvroSchema(o2)).send(
            o2(name="y", age=2, email="y@example.org")
        )
        assert [m.value().name for m in (r1.receive(5000), r1.receive(5000))] == ["x", "y"]
        assert [m.value().email for m in (r2.receive(5000), r2.receive(5000))] == [
            None,
            "y@example.org",
        ]
    finally:
        sq.close()
        official.close()


def test_asyncio_reader_decodes_old_versions(broker: EmbeddedBroker, topic: str) -> None:
    admin_json(broker, "PUT", f"{NS}/schemaCompatibilityStrategy", "BACKWARD")
    v1, v2 = _user_classes(starquake.client)
    schema = starquake.client.schema

    async def scenario() -> list[Any]:
        client = sq_asyncio.Client(broker.service_url)
        try:
            p1 = await client.create_producer(topic, schema=schema.AvroSchema(v1))
            await p1.send(v1(name="old", age=1))
            p2 = await client.create_producer(topic, schema=schema.AvroSchema(v2))
            await p2.send(v2(name="new", age=2, email="e"))
            reader = await client.create_reader(
                topic, starquake.client.MessageId.earliest, schema=schema.AvroSchema(v2)
            )
            values = [(await reader.read_next(5000)).value() for _ in range(2)]
            latest = await client.get_schema_info(topic)
            assert latest is not None and b'"email"' in latest.data
            assert await client.get_schema_info(topic, 0) is not None
            assert await client.get_schema_info(f"{topic}-none") is None
            return values
        finally:
            await client.close()

    values = asyncio.run(scenario())
    assert [(v.name, v.email) for v in values] == [("old", None), ("new", "e")]


def test_key_value_with_our_client(broker: EmbeddedBroker, topic: str) -> None:
    schema = starquake.client.schema
    user, _ = _user_classes(starquake.client)
    client = make_client(starquake.client, broker)
    try:
        kv = schema.KeyValueSchema(schema.StringSchema(), schema.AvroSchema(user))
        consumer = client.subscribe(topic, "s", schema=kv)
        producer = client.create_producer(topic, schema=kv)
        producer.send(("k1", user(name="v", age=9)))
        assert consumer.receive(timeout_millis=5000).value() == ("k1", user(name="v", age=9))
        status, body = admin_json(
            broker, "GET", f"/admin/v2/schemas/public/default/{topic.rsplit('/', 1)[1]}/schema"
        )
        assert status == 200 and body["type"] == "KEY_VALUE"
        assert body["properties"]["key.schema.type"] == "STRING"
        with pytest.raises(starquake.client.IncompatibleSchema):
            client.subscribe(
                topic,
                "other",
                schema=schema.KeyValueSchema(schema.StringSchema(), schema.StringSchema()),
            )
    finally:
        client.close()


def test_bytes_producer_on_typed_topic_needs_validation_off(
    broker: EmbeddedBroker, topic: str
) -> None:
    client = make_client(starquake.client, broker)
    try:
        client.create_producer(topic, schema=starquake.client.schema.StringSchema()).close()
        client.create_producer(topic).close()
        admin_json(broker, "POST", f"{NS}/schemaValidationEnforced", True)
        with pytest.raises(starquake.client.IncompatibleSchema):
            client.create_producer(topic)
        name = f"persistent://public/default/other-{uuid.uuid4().hex[:8]}"
        client.create_producer(name).close()  # a topic without a schema still takes bytes
    finally:
        client.close()


def _point_class() -> type:
    from google.protobuf import descriptor_pb2, descriptor_pool, message_factory

    file = descriptor_pb2.FileDescriptorProto(name="sq_scenario_point.proto", package="sqs")
    message = file.message_type.add(name="Point")
    message.field.add(name="x", number=1, type=descriptor_pb2.FieldDescriptorProto.TYPE_INT64)
    pool = descriptor_pool.DescriptorPool()
    pool.Add(file)
    return message_factory.GetMessageClass(pool.FindMessageTypeByName("sqs.Point"))


def test_protobuf_native_across_clients(broker: EmbeddedBroker, topic: str) -> None:
    point = _point_class()
    sq = make_client(starquake.client, broker)
    official = make_client(pulsar, broker)
    try:
        ours = sq.subscribe(
            topic, "ours", schema=starquake.client.schema.ProtobufNativeSchema(point)
        )
        theirs = official.subscribe(
            topic, "theirs", schema=pulsar.schema.ProtobufNativeSchema(point)
        )
        official.create_producer(topic, schema=pulsar.schema.ProtobufNativeSchema(point)).send(
            point(x=1)
        )
        sq.create_producer(topic, schema=starquake.client.schema.ProtobufNativeSchema(point)).send(
            point(x=2)
        )
        assert [ours.receive(5000).value().x for _ in range(2)] == [1, 2]
        assert [theirs.receive(5000).value().x for _ in range(2)] == [1, 2]
    finally:
        sq.close()
        official.close()


def test_invalid_definition_on_the_wire_is_refused(broker: EmbeddedBroker, topic: str) -> None:
    """A producer declaring a definition that is not Avro gets IncompatibleSchema with the
    reason; nothing is registered and the broker goes on serving."""
    schema = starquake.client.schema

    class BrokenAvro(schema.BytesSchema):
        def schema_info(self) -> schema.SchemaInfo:
            return schema.SchemaInfo(schema.SchemaType.AVRO, b'{"type": "record"', {}, "AVRO")

    client = make_client(starquake.client, broker)
    try:
        with pytest.raises(starquake.client.IncompatibleSchema, match="AVRO"):
            client.create_producer(topic, schema=BrokenAvro())
        assert client.get_schema_info(topic) is None
        producer = client.create_producer(topic, schema=schema.StringSchema())
        producer.send("still serving")
        assert client.get_schema_info(topic) is not None
    finally:
        client.close()
