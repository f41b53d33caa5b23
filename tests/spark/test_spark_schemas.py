"""Typed reads (``schema.decode``) and typed writes (``schema.type``) against a real broker."""

from __future__ import annotations

import datetime
import decimal
import json
import uuid
from pathlib import Path
from typing import Any

import pulsar
import pulsar.schema
import pytest
from conftest import SparkBroker
from spark_helpers import load, load_stream

from starquake.client import Client
from starquake.client.schema import (
    Array,
    AvroSchema,
    Double,
    Integer,
    JsonSchema,
    Map,
    Record,
    Schema,
    String,
    StringSchema,
)

METADATA = [
    "__key",
    "__topic",
    "__messageId",
    "__publishTime",
    "__eventTime",
    "__messageProperties",
]


def _event_v1() -> type[Record]:
    class Event(Record):
        name = String(required=True)
        count = Integer(required=True)

    return Event


def _event_v2() -> type[Record]:
    """Version 2 adds a field with a default: rows written with version 1 read it."""

    class Event(Record):
        name = String(required=True)
        count = Integer(required=True)
        source = String(default="unknown", required=True, required_default=True)

    return Event


EventV1 = _event_v1()
EventV2 = _event_v2()


class Place(Record):
    city = String(required=True)


def _visit(with_visits: bool) -> type[Record]:
    class Visit(Record):
        user = String(required=True)
        place = Place(required=True)
        tags = Array(String())
        scores = Map(Double())
        if with_visits:
            visits = Integer(default=1, required=True, required_default=True)

    return Visit


VisitV1 = _visit(False)
VisitV2 = _visit(True)


def _send(broker: SparkBroker, topic: str, schema: Schema | None, values: list[Any]) -> None:
    """``values`` in batched entries (several messages share one schema version)."""
    client = Client(broker.url)
    try:
        producer = client.create_producer(
            topic, schema=schema, batching_enabled=True, batching_max_publish_delay_ms=50
        )
        for i, value in enumerate(values):
            producer.send_async(value, None, partition_key=f"k{i}")
        producer.flush()
        producer.close()
    finally:
        client.close()


def _events(broker: SparkBroker, topic: str) -> None:
    _send(broker, topic, AvroSchema(EventV1), [EventV1(name=f"e{i}", count=i) for i in range(4)])
    v2 = [EventV2(name=f"f{i}", count=10 + i, source="web") for i in range(3)]
    _send(broker, topic, AvroSchema(EventV2), v2)


def _write(df: Any, broker: SparkBroker, **options: str) -> None:
    writer = df.write.format("pulsar").mode("append")
    for key, value in broker.options(**options).items():
        writer = writer.option(key, value)
    writer.save()


def _decoded(spark: Any, broker: SparkBroker, **options: str) -> Any:
    return load(spark, broker, **{"schema.decode": "true", **options})


def test_avro_versions_read_as_typed_columns_with_defaults_for_old_rows(
    spark: Any, spark_broker: SparkBroker, new_topic: str
) -> None:
    spark_broker.create_partitioned(new_topic, 2)
    _events(spark_broker, new_topic)
    df = _decoded(spark, spark_broker, topic=new_topic)
    assert df.columns == ["name", "count", "source", *METADATA]
    types = {f.name: f.dataType.simpleString() for f in df.schema.fields}
    assert (types["name"], types["count"], types["source"]) == ("string", "int", "string")
    rows = sorted(df.collect(), key=lambda r: r["name"])
    assert [(r["name"], r["count"], r["source"]) for r in rows] == [
        *[(f"e{i}", i, "unknown") for i in range(4)],
        *[(f"f{i}", 10 + i, "web") for i in range(3)],
    ]
    assert {r["__topic"] for r in rows} <= {f"{new_topic}-partition-{i}" for i in range(2)}
    assert all(r["__key"] and r["__messageId"] for r in rows)
    # without the option the raw layout is unchanged
    assert load(spark, spark_broker, topic=new_topic).columns == ["value", *METADATA]


def test_json_topic_reads_nested_records_arrays_and_maps(
    spark: Any, spark_broker: SparkBroker, new_topic: str
) -> None:
    paris, rome = Place(city="Paris"), Place(city="Rome")
    old = VisitV1(user="ann", place=paris, tags=["a", "b"], scores={"x": 1.5})
    new = VisitV2(user="bob", place=rome, tags=None, scores={}, visits=3)
    _send(spark_broker, new_topic, JsonSchema(VisitV1), [old])
    _send(spark_broker, new_topic, JsonSchema(VisitV2), [new])
    df = _decoded(spark, spark_broker, topic=new_topic)
    assert df.schema.simpleString().startswith(
        "struct<user:string,place:struct<city:string>,tags:array<string>,"
        "scores:map<string,double>,visits:int,__key:string"
    )
    rows = {r["user"]: r for r in df.collect()}
    assert rows["ann"]["place"]["city"] == "Paris"
    assert rows["ann"]["tags"] == ["a", "b"]
    assert rows["ann"]["scores"] == {"x": 1.5}
    assert rows["ann"]["visits"] == 1  # the default of a field version 1 lacks
    assert (rows["bob"]["tags"], rows["bob"]["visits"]) == (None, 3)


def test_string_topic_reads_as_a_string_value(
    spark: Any, spark_broker: SparkBroker, new_topic: str
) -> None:
    _send(spark_broker, new_topic, StringSchema(), ["héllo", "wörld"])
    df = _decoded(spark, spark_broker, topic=new_topic)
    assert df.schema.fields[0].simpleString() == "value:string"
    assert sorted(r["value"] for r in df.collect()) == ["héllo", "wörld"]


def test_streaming_read_of_a_decoded_topic(
    spark: Any, spark_broker: SparkBroker, new_topic: str, workdir: Path
) -> None:
    _events(spark_broker, new_topic)
    name = f"decoded_{uuid.uuid4().hex[:8]}"
    options = {"topic": new_topic, "startingOffsets": "earliest", "schema.decode": "true"}
    stream = load_stream(spark, spark_broker, **options)
    query = (
        stream.select("name", "count", "source")
        .writeStream.format("memory")
        .queryName(name)
        .option("checkpointLocation", str(workdir / "checkpoint"))
        .trigger(availableNow=True)
        .start()
    )
    query.awaitTermination(120)
    assert query.exception() is None
    rows = sorted(tuple(r) for r in spark.sql(f"select * from {name}").collect())
    assert rows == [
        *[(f"e{i}", i, "unknown") for i in range(4)],
        *[(f"f{i}", 10 + i, "web") for i in range(3)],
    ]


def _typed_rows(spark: Any) -> Any:
    return spark.range(5).selectExpr(
        "concat('n', cast(id as string)) as name",
        "id as count",
        "array('a', concat('t', cast(id as string))) as tags",
        "map('score', cast(id as double) / 2) as scores",
        "timestamp_millis(1700000000000 + id) as at",
        "date_add(date'2024-01-01', cast(id as int)) as day",
        "cast(id + 0.25 as decimal(10, 2)) as price",
        "named_struct('x', id * 10) as inner",
        "concat('k', cast(id as string)) as __key",
    )


@pytest.mark.parametrize("kind", ["avro", "json"])
def test_write_with_a_derived_schema_registers_it_and_reads_back(
    spark: Any, spark_broker: SparkBroker, new_topic: str, kind: str
) -> None:
    source = _typed_rows(spark)
    _write(source, spark_broker, topic=new_topic, **{"schema.type": kind, "schema.name": "Item"})
    client = Client(spark_broker.url)
    try:
        info = client.get_schema_info(new_topic)
    finally:
        client.close()
    assert info is not None and info.type.name == kind.upper()
    definition = json.loads(info.data)
    assert definition["name"] == "Item"
    assert [f["name"] for f in definition["fields"]] == [
        "name", "count", "tags", "scores", "at", "day", "price", "inner"
    ]  # fmt: skip
    df = _decoded(spark, spark_broker, topic=new_topic)
    # top-level columns read back nullable; the types, nested nullability included, are kept
    assert [(f.name, f.dataType) for f in df.schema.fields[:8]] == [
        (f.name, f.dataType) for f in source.schema.fields[:8]
    ]
    got = sorted(df.select(*source.columns).collect(), key=lambda r: r["name"])
    assert got == sorted(source.collect(), key=lambda r: r["name"])
    if kind != "avro":
        return
    # the official client reads what was written, with the registered schema
    official = pulsar.Client(
        spark_broker.url, logger=pulsar.ConsoleLogger(pulsar.LoggerLevel.Error)
    )
    try:
        reader = official.create_reader(
            new_topic,
            pulsar.MessageId.earliest,
            schema=pulsar.schema.AvroSchema(None, schema_definition=definition),
        )
        values, versions = [], set()
        while reader.has_message_available():
            msg = reader.read_next(5000)
            values.append(msg.value())
            versions.add(msg.schema_version())
        reader.close()
    finally:
        official.close()
    assert versions == {"\x00" * 8}  # every message names version 0, the registered one
    first = min(values, key=lambda v: v["name"])
    assert first["name"] == "n0" and first["count"] == 0 and first["tags"] == ["a", "t0"]
    assert first["at"] == datetime.datetime(2023, 11, 14, 22, 13, 20, tzinfo=datetime.UTC)
    assert first["day"] == datetime.date(2024, 1, 1)
    assert first["price"] == decimal.Decimal("0.25")
    assert first["inner"] == {"x": 0}


def test_write_string_schema(spark: Any, spark_broker: SparkBroker, new_topic: str) -> None:
    df = spark.createDataFrame([("a",), ("b",)], "value string")
    _write(df, spark_broker, topic=new_topic, **{"schema.type": "string"})
    decoded = _decoded(spark, spark_broker, topic=new_topic)
    assert sorted(r["value"] for r in decoded.collect()) == ["a", "b"]


def test_topics_with_different_schemas_and_bad_payloads_fail_clearly(
    spark: Any, spark_broker: SparkBroker, new_topic: str
) -> None:
    other = f"{new_topic}-other"
    _send(spark_broker, new_topic, AvroSchema(EventV1), [EventV1(name="ok", count=1)])
    _send(spark_broker, other, StringSchema(), ["text"])
    with pytest.raises(Exception, match="must share one schema") as info:
        _decoded(spark, spark_broker, topics=f"{new_topic},{other}")
    assert "schema type AVRO" in str(info.value)
    pattern = f"public/default/{new_topic.rsplit('/', 1)[1]}.*"
    with pytest.raises(Exception, match="must share one schema"):
        _decoded(spark, spark_broker, topicsPattern=pattern)
    # a schema given to the read must be the topic's
    given = spark.read.format("pulsar").schema("name string")
    for key, value in spark_broker.options(topic=new_topic, **{"schema.decode": "true"}).items():
        given = given.option(key, value)
    with pytest.raises(Exception, match="differs from the topic's"):
        given.load().collect()
    # a producer without a schema may still write to the topic: its bytes are no record
    _send(spark_broker, new_topic, None, [b"\xff\xfe not avro"])
    with pytest.raises(Exception, match=r"message \(\d+,\d+,-1,\d+\) does not decode"):
        _decoded(spark, spark_broker, topic=new_topic).collect()
