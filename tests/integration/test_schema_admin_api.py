"""The schema endpoints of the admin API over real HTTP: upload, read, versions, compatibility
tests, deletion, and bad definitions refused with the registry unchanged."""

from __future__ import annotations

import json
import uuid

from admin_http import admin_json, http_call

from starquake.broker.embedded import EmbeddedBroker

V1 = {
    "type": "record",
    "name": "User",
    "namespace": "t",
    "fields": [{"name": "name", "type": "string"}],
}
V2_WITH_DEFAULT = {
    **V1,
    "fields": [*V1["fields"], {"name": "age", "type": "int", "default": 0}],
}
V2_WITHOUT_DEFAULT = {**V1, "fields": [*V1["fields"], {"name": "age", "type": "int"}]}


def _base(topic: str) -> str:
    return f"/admin/v2/schemas/public/default/{topic}"


def _post(broker: EmbeddedBroker, topic: str, definition: object, kind: str = "AVRO") -> tuple:
    body = {"type": kind, "schema": json.dumps(definition), "properties": {"p": "1"}}
    return admin_json(broker, "POST", f"{_base(topic)}/schema", body)


def _versions(broker: EmbeddedBroker, topic: str) -> list[int]:
    status, body = admin_json(broker, "GET", f"{_base(topic)}/versions")
    if status == 404:
        return []
    assert status == 200
    return [v["version"] for v in body["getSchemaResponses"]]


def _topic() -> str:
    return f"s-{uuid.uuid4().hex[:10]}"


def test_upload_read_and_evolve(broker: EmbeddedBroker) -> None:
    topic = _topic()
    admin_json(
        broker, "PUT", "/admin/v2/namespaces/public/default/schemaCompatibilityStrategy", "BACKWARD"
    )
    assert _post(broker, topic, V1) == (200, {"version": {"version": 0}})
    assert _post(broker, topic, V1) == (200, {"version": {"version": 0}})  # same definition
    status, latest = admin_json(broker, "GET", f"{_base(topic)}/schema")
    assert status == 200
    assert latest["version"] == 0 and latest["type"] == "AVRO"
    assert json.loads(latest["data"]) == V1 and latest["properties"] == {"p": "1"}
    assert isinstance(latest["timestamp"], int) and latest["timestamp"] > 0

    assert _post(broker, topic, V2_WITH_DEFAULT) == (200, {"version": {"version": 1}})
    status, first = admin_json(broker, "GET", f"{_base(topic)}/schema/0")
    assert status == 200 and json.loads(first["data"]) == V1
    assert _versions(broker, topic) == [0, 1]
    status, found = admin_json(
        broker, "POST", f"{_base(topic)}/version", {"type": "AVRO", "schema": json.dumps(V1)}
    )
    assert (status, found) == (200, {"version": 0})


def test_incompatible_and_invalid_schemas_leave_the_registry_unchanged(
    broker: EmbeddedBroker,
) -> None:
    topic = _topic()
    admin_json(
        broker, "PUT", "/admin/v2/namespaces/public/default/schemaCompatibilityStrategy", "BACKWARD"
    )
    assert _post(broker, topic, V1)[0] == 200

    status, body = _post(broker, topic, V2_WITHOUT_DEFAULT)
    assert status == 409 and body["reason"]

    status, body = admin_json(
        broker, "POST", f"{_base(topic)}/schema", {"type": "AVRO", "schema": '{"type": "record"'}
    )
    assert status == 422 and body["reason"]
    status, body = _post(
        broker,
        topic,
        {"type": "record", "name": "X", "fields": [{"name": "a", "type": "no-such-type"}]},
    )
    assert status == 422 and body["reason"]
    status, body = admin_json(
        broker, "POST", f"{_base(topic)}/schema", {"type": "NOT_A_TYPE", "schema": "{}"}
    )
    assert status == 400 and "NOT_A_TYPE" in body["reason"]
    status, raw = http_call(broker.web_service_url, "POST", f"{_base(topic)}/schema", b"{oops")
    assert b"not valid JSON" in raw
    assert status == 400
    status, body = admin_json(
        broker, "POST", f"{_base(topic)}/schema", {"type": "STRING", "schema": "not empty"}
    )
    assert status == 422

    assert _versions(broker, topic) == [0]
    status, latest = admin_json(broker, "GET", f"{_base(topic)}/schema")
    assert json.loads(latest["data"]) == V1


def test_compatibility_check_stores_nothing(broker: EmbeddedBroker) -> None:
    topic = _topic()
    admin_json(
        broker, "PUT", "/admin/v2/namespaces/public/default/schemaCompatibilityStrategy", "BACKWARD"
    )
    _post(broker, topic, V1)
    path = f"{_base(topic)}/compatibility"
    status, body = admin_json(
        broker, "POST", path, {"type": "AVRO", "schema": json.dumps(V2_WITHOUT_DEFAULT)}
    )
    assert status == 200
    assert body["isCompatibility"] is False and body["schemaCompatibilityStrategy"] == "BACKWARD"
    status, body = admin_json(
        broker, "POST", path, {"type": "AVRO", "schema": json.dumps(V2_WITH_DEFAULT)}
    )
    assert status == 200 and body["isCompatibility"] is True
    assert _versions(broker, topic) == [0]


def test_delete_then_a_new_history(broker: EmbeddedBroker) -> None:
    topic = _topic()
    _post(broker, topic, V1)
    status, body = admin_json(broker, "DELETE", f"{_base(topic)}/schema")
    assert (status, body) == (200, {"version": 1})
    assert admin_json(broker, "GET", f"{_base(topic)}/schema")[0] == 404
    assert _versions(broker, topic) == []
    # the old version stays readable by number; a new schema starts a new history
    assert admin_json(broker, "GET", f"{_base(topic)}/schema/0")[0] == 200
    assert _post(broker, topic, {"type": "string"}) == (200, {"version": {"version": 2}})
    status, _ = admin_json(broker, "DELETE", f"{_base(topic)}/schema?force=true")
    assert status == 200
    assert admin_json(broker, "GET", f"{_base(topic)}/schema/0")[0] == 404
    assert _post(broker, topic, V1) == (200, {"version": {"version": 0}})


def test_key_value_schema_upload(broker: EmbeddedBroker) -> None:
    topic = _topic()
    body = {
        "type": "KEY_VALUE",
        "schema": json.dumps({"key": "", "value": V1}),
        "properties": {"key.schema.type": "STRING", "value.schema.type": "AVRO"},
    }
    status, reply = admin_json(broker, "POST", f"{_base(topic)}/schema", body)
    assert (status, reply) == (200, {"version": {"version": 0}})
    status, latest = admin_json(broker, "GET", f"{_base(topic)}/schema")
    assert status == 200 and latest["type"] == "KEY_VALUE"
    assert json.loads(latest["data"]) == {"key": "", "value": V1}
    assert latest["properties"]["kv.encoding.type"] == "INLINE"


def test_unknown_namespace_and_topic_deletion(broker: EmbeddedBroker) -> None:
    status, body = admin_json(broker, "GET", "/admin/v2/schemas/public/nope/t/schema")
    assert status == 404 and "nope" in body["reason"]
    topic = _topic()
    full = f"persistent://public/default/{topic}"
    assert admin_json(broker, "PUT", f"/admin/v2/persistent/public/default/{topic}")[0] == 204
    _post(broker, topic, V1)
    assert _versions(broker, topic) == [0]
    status, _ = admin_json(broker, "DELETE", f"/admin/v2/persistent/public/default/{topic}")
    assert status == 204, full
    assert _versions(broker, topic) == []
    assert admin_json(broker, "GET", f"{_base(topic)}/schema/0")[0] == 404


def test_namespace_schema_policies(broker: EmbeddedBroker) -> None:
    ns = "/admin/v2/namespaces/public/default"
    assert admin_json(broker, "GET", f"{ns}/isAllowAutoUpdateSchema")[0] == 204
    assert admin_json(broker, "POST", f"{ns}/isAllowAutoUpdateSchema", False)[0] == 204
    assert admin_json(broker, "GET", f"{ns}/isAllowAutoUpdateSchema") == (200, False)
    assert admin_json(broker, "POST", f"{ns}/schemaValidationEnforced", "yes")[0] == 400
    assert admin_json(broker, "POST", f"{ns}/schemaValidationEnforced", True)[0] == 204
    assert admin_json(broker, "GET", f"{ns}/schemaValidationEnforced") == (200, True)


def test_a_partition_name_reaches_its_topic_schema(broker: EmbeddedBroker) -> None:
    """Partitions share their partitioned topic's schemas, over HTTP as on the wire."""
    topic = _topic()
    assert _post(broker, topic, V1) == (200, {"version": {"version": 0}})
    status, latest = admin_json(broker, "GET", f"{_base(topic)}-partition-1/schema")
    assert status == 200 and json.loads(latest["data"]) == V1
