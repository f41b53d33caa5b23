"""Schema endpoints of the admin API, under ``/admin/v2/schemas/{tenant}/{namespace}/{topic}``.

A topic's schemas are shared by its partitions and by its persistent and non-persistent forms,
so the paths name no domain. Bodies use Pulsar's field names::

    GET    .../schema               {"version", "type", "timestamp", "data", "properties"}
    GET    .../schema/{version}     the same, for one version
    GET    .../versions             {"getSchemaResponses": [...]}  (since the last deletion)
    POST   .../schema               {"type", "schema", "properties"} -> {"version": {"version": N}}
    DELETE .../schema[?force=true]  {"version": N} (the deletion's version)
    POST   .../compatibility        {"type", "schema", "properties"}
                                    -> {"isCompatibility": bool, "schemaCompatibilityStrategy"}
    POST   .../version              {"type", "schema", "properties"} -> {"version": N}

``data`` and ``schema`` hold the definition as text. For KEY_VALUE they hold a JSON object
``{"key": ..., "value": ...}`` with each part's definition (a JSON value, or a string), and the
properties name the parts' types (``key.schema.type``, ``value.schema.type``).

Errors: 404 no such topic schema or version; 400 a malformed body or unknown type; 422 an
invalid definition; 409 a schema the compatibility strategy refuses. Nothing is stored on error.
"""

from __future__ import annotations

import asyncio
import json
import logging
from typing import TYPE_CHECKING, Any

from starquake.broker.admin.replies import (
    SEGMENT,
    BadRequest,
    Reply,
    json_body,
    parse_json,
    whole_number,
)
from starquake.broker.admin.routing import Route
from starquake.broker.resources import NotFoundError
from starquake.broker.schemas.compatibility import IncompatibleSchemaError, InvalidSchemaError
from starquake.broker.schemas.registry import StoredSchema, schema_id
from starquake.broker.schemas.topic_schemas import check_schema_size, compatibility_strategy
from starquake.broker.web import Call, Need, json_reply
from starquake.common.schema_info import (
    SchemaInfo,
    SchemaType,
    pack_key_value_schema,
    unpack_key_value_schema,
)
from starquake.common.topic_name import TopicName

if TYPE_CHECKING:
    from starquake.broker.service import BrokerService

log = logging.getLogger(__name__)

_BASE = rf"/admin/v2/schemas/(?P<tenant>{SEGMENT})/(?P<namespace>{SEGMENT})/(?P<topic>{SEGMENT})"


def _text(data: bytes) -> str:
    return data.decode("utf-8", errors="replace")


def _definition_json(data: bytes) -> Any:
    """A KEY_VALUE part's definition as a JSON value when it is one, else as text."""
    try:
        return json.loads(data) if data else ""
    except ValueError:
        return _text(data)


def schema_reply(stored: StoredSchema) -> dict[str, Any]:
    """Pulsar's GetSchemaResponse for one version."""
    info = stored.info
    data = _text(info.data)
    if info.type is SchemaType.KEY_VALUE:
        try:
            key, value, _ = unpack_key_value_schema(info)
            data = json.dumps(
                {"key": _definition_json(key.data), "value": _definition_json(value.data)}
            )
        except ValueError:
            pass
    return {
        "version": stored.version,
        "type": info.type.name,
        "timestamp": stored.timestamp,
        "data": data,
        "properties": info.properties,
    }


def _part_data(value: Any) -> bytes:
    if value is None or value == "":
        return b""
    if isinstance(value, str):
        return value.encode()
    return json.dumps(value).encode()


def payload_schema(body: bytes) -> SchemaInfo:
    """The schema a POST body declares (Pulsar's PostSchemaPayload); BadRequest if malformed."""
    value = json_body(body)
    if not isinstance(value, dict):
        raise BadRequest('the body must be a JSON object: {"type", "schema", "properties"}')
    type_name = value.get("type")
    try:
        kind = SchemaType[str(type_name).upper()]
    except KeyError:
        names = ", ".join(t.name for t in SchemaType if t.value >= -1)
        raise BadRequest(f"type: unknown schema type {type_name!r}; one of {names}") from None
    properties = value.get("properties") or {}
    if not isinstance(properties, dict):
        raise BadRequest("properties must be a JSON object of strings")
    props = {str(k): str(v) for k, v in properties.items()}
    definition = value.get("schema", "")
    if kind is SchemaType.KEY_VALUE:
        parts = (
            parse_json(definition, "the KEY_VALUE schema")
            if isinstance(definition, str) and definition
            else definition
        )
        if not isinstance(parts, dict) or set(parts) - {"key", "value"}:
            raise BadRequest('a KEY_VALUE schema must be a JSON object {"key": ..., "value": ...}')
        try:
            key_type = SchemaType[props.get("key.schema.type", "BYTES")]
            value_type = SchemaType[props.get("value.schema.type", "BYTES")]
        except KeyError as exc:
            raise BadRequest(f"unknown key/value schema type {exc}") from None
        packed = pack_key_value_schema(
            SchemaInfo(key_type, _part_data(parts.get("key"))),
            SchemaInfo(value_type, _part_data(parts.get("value"))),
            props.get("kv.encoding.type", "INLINE"),
        )
        return SchemaInfo(kind, packed.data, {**packed.properties, **props}, "KeyValue")
    if not isinstance(definition, str):
        definition = json.dumps(definition)
    return SchemaInfo(kind, definition.encode(), props, str(value.get("name", "")))


def schema_id_of(service: BrokerService, params: dict[str, str]) -> tuple[str, str]:
    """The schema id and namespace of the path (404: no such namespace)."""
    namespace = f"{params['tenant']}/{params['namespace']}"
    if not service.resources.namespace_exists(namespace):
        raise NotFoundError(f"Namespace {namespace} does not exist")
    return schema_id(TopicName.parse(f"{namespace}/{params['topic']}")), namespace


async def get_latest(service: BrokerService, call: Call) -> Reply:
    """The topic's latest schema."""
    sid, _ = schema_id_of(service, call.params)
    stored = await asyncio.to_thread(service.schemas.get, sid, None)
    if stored is None:
        raise NotFoundError("Schema not found")
    return json_reply(200, schema_reply(stored))


async def get_version(service: BrokerService, call: Call) -> Reply:
    """One version of the topic's schema."""
    sid, _ = schema_id_of(service, call.params)
    version = whole_number(call.params["version"], "the version")
    stored = await asyncio.to_thread(service.schemas.get, sid, version)
    if stored is None:
        raise NotFoundError(f"Schema version {version} not found")
    return json_reply(200, schema_reply(stored))


async def get_versions(service: BrokerService, call: Call) -> Reply:
    """Every live version of the topic's schema."""
    sid, _ = schema_id_of(service, call.params)
    live = await asyncio.to_thread(service.schemas.live, sid)
    if not live:
        raise NotFoundError("Schema not found")
    return json_reply(200, {"getSchemaResponses": [schema_reply(s) for s in live]})


async def post_schema(service: BrokerService, call: Call) -> Reply:
    """Add the body's schema (a new version when it differs and is compatible)."""
    sid, namespace = schema_id_of(service, call.params)
    info = payload_schema(call.body)
    strategy = compatibility_strategy(service, namespace)
    try:
        check_schema_size(service, info)
        version = await asyncio.to_thread(service.schemas.add_schema, sid, info, strategy)
    except InvalidSchemaError as exc:
        return json_reply(422, {"reason": exc.message})
    except IncompatibleSchemaError as exc:
        return json_reply(409, {"reason": exc.message})
    log.info("schema of %s: version %d (%s)", sid, version, info.type.name)
    return json_reply(200, {"version": {"version": version}})


async def delete_schema(service: BrokerService, call: Call) -> Reply:
    """Delete the topic's schema (``force``: every version at once)."""
    sid, _ = schema_id_of(service, call.params)
    force = call.params.get("force", "false").lower() == "true"
    version = await asyncio.to_thread(service.schemas.delete, sid, force=force)
    log.info("schema of %s deleted%s", sid, " (forced)" if force else "")
    return json_reply(200, {"version": version if version is not None else -1})


async def compatibility(service: BrokerService, call: Call) -> Reply:
    """Whether the body's schema is compatible with the topic's."""
    sid, namespace = schema_id_of(service, call.params)
    info = payload_schema(call.body)
    strategy = compatibility_strategy(service, namespace)
    ok, reason = await asyncio.to_thread(service.schemas.is_compatible, sid, info, strategy)
    reply: dict[str, Any] = {"isCompatibility": ok, "schemaCompatibilityStrategy": strategy}
    if reason:
        reply["reason"] = reason
    return json_reply(200, reply)


async def version_of(service: BrokerService, call: Call) -> Reply:
    """The version of the topic's schema equal to the body's."""
    sid, _ = schema_id_of(service, call.params)
    info = payload_schema(call.body)
    version = await asyncio.to_thread(service.schemas.version_of, sid, info)
    if version is None:
        raise NotFoundError("Not found schema")
    return json_reply(200, {"version": version})


_PAYLOAD = "PostSchemaPayload"

ROUTES = [
    Route("GET", f"{_BASE}/schema", get_latest, Need.TOPIC_LOOKUP),
    Route("GET", rf"{_BASE}/schema/(?P<version>{SEGMENT})", get_version, Need.TOPIC_LOOKUP),
    Route("GET", f"{_BASE}/versions", get_versions, Need.TOPIC_LOOKUP),
    Route("POST", f"{_BASE}/schema", post_schema, Need.TOPIC_ADMIN, _PAYLOAD),
    Route("DELETE", f"{_BASE}/schema", delete_schema, Need.TOPIC_ADMIN),
    Route("POST", f"{_BASE}/compatibility", compatibility, Need.TOPIC_LOOKUP, _PAYLOAD),
    Route("POST", f"{_BASE}/version", version_of, Need.TOPIC_LOOKUP, _PAYLOAD),
]
"""The endpoints of schemas."""
