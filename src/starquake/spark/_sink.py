"""Checks of a write before it starts: the DataFrame's columns, the broker's deduplication."""

from __future__ import annotations

import json
import logging
import urllib.error
import urllib.request
from collections.abc import Mapping, Set
from typing import Any

from pyspark.sql.types import (
    ArrayType,
    BinaryType,
    DataType,
    LongType,
    MapType,
    StringType,
    StructType,
    TimestampNTZType,
    TimestampType,
)

from starquake.client import ConsumerType, InitialPosition
from starquake.client.asyncio import Client
from starquake.client.exceptions import PulsarException
from starquake.client.topics import namespace_of
from starquake.spark._options import PulsarOptionError, WriteOptions
from starquake.spark._runtime import admin_http

__all__ = [
    "PulsarSinkError",
    "check_schema",
    "deduplication_off_error",
    "ensure_deduplication",
    "hold_topic",
]

log = logging.getLogger("starquake.spark")

_ACCEPTED: dict[str, tuple[type[DataType], ...]] = {
    "value": (BinaryType, StringType),
    "__key": (StringType, BinaryType),
    "__eventTime": (TimestampType, TimestampNTZType, LongType),
    "__messageProperties": (MapType,),
    "__topic": (StringType,),
    "headers": (ArrayType,),  # Kafka's: array<struct<key: string, value: binary or string>>
}
# Columns of the source that a write ignores, so that a read can be written back as it is.
_IGNORED = {"__messageId", "__publishTime"}


class PulsarSinkError(RuntimeError):
    """A write cannot go ahead (deduplication cannot be turned on, a topic is missing...)."""

    __module__ = "starquake.spark"  # as users import it


def check_schema(schema: StructType, opts: WriteOptions, encoded: Set[str] = frozenset()) -> None:
    """Refuse, at planning time, columns the sink does not know or cannot write.

    ``encoded`` names the columns a ``schema.type`` encodes into the value (checked there)."""
    names = {f.name for f in schema.fields}
    if "value" not in names and not encoded:
        raise PulsarOptionError("the DataFrame to write needs a 'value' column (binary or string)")
    for f in schema.fields:
        if f.name in _IGNORED or f.name in encoded:
            continue
        accepted = _ACCEPTED.get(f.name)
        if accepted is None:
            raise PulsarOptionError(
                f"column {f.name!r} cannot be written: the sink takes value, __key, __eventTime, "
                "__messageProperties, headers and __topic (encode other fields into value, or "
                "write them as a record with the option schema.type)"
            )
        if not isinstance(f.dataType, accepted):
            raise PulsarOptionError(
                f"column {f.name!r} has type {f.dataType.simpleString()}; expected "
                + " or ".join(t.typeName() for t in accepted)
            )
        if isinstance(f.dataType, ArrayType) and not _is_headers(f.dataType):
            raise PulsarOptionError(
                f"column 'headers' has type {f.dataType.simpleString()}; expected "
                "array<struct<key:string,value:binary>> as Kafka's (or value string)"
            )
        if isinstance(f.dataType, MapType) and not (
            isinstance(f.dataType.keyType, StringType)
            and isinstance(f.dataType.valueType, StringType)
        ):
            raise PulsarOptionError("column '__messageProperties' must be map<string,string>")
    if opts.topic is None and "__topic" not in names:
        raise PulsarOptionError("give the option 'topic' or a '__topic' column")


def _is_headers(kind: ArrayType) -> bool:
    entry = kind.elementType
    if not isinstance(entry, StructType) or [f.name for f in entry.fields] != ["key", "value"]:
        return False
    return isinstance(entry["key"].dataType, StringType) and isinstance(
        entry["value"].dataType, (BinaryType, StringType)
    )


def _turn_on_hint(namespace: str) -> str:
    return (
        f"turn it on (pulsar-admin namespaces set-deduplication {namespace} --enable, as a "
        "tenant admin), or give the option 'admin.url' (the broker's HTTP admin URL) with a "
        "role that may turn it on, or write with the option exactlyOnce=false (at-least-once)"
    )


def ensure_deduplication(
    admin_url: str,
    topic: str,
    timeout: float = 30.0,
    client_args: Mapping[str, Any] | None = None,
) -> bool:
    """Through the admin API at ``admin_url`` (the option ``admin.url``): turn broker
    deduplication on for ``topic``'s namespace unless it is on already. True when it is on;
    False when the role may not read the setting (the tasks then check the broker's answers
    to their producers: see :func:`deduplication_off_error`).

    ``client_args`` (the checked ``pulsar.client.*`` settings) give the TLS settings of an
    ``https://`` admin URL and the credentials sent."""
    namespace = namespace_of(topic)
    url = f"{admin_url}/admin/v2/namespaces/{namespace}/deduplication"
    try:
        context, headers = admin_http(admin_url, client_args or {})
    except ValueError as exc:  # a TLS file that cannot be used
        raise PulsarSinkError(f"option 'admin.url' ({admin_url}): cannot call it: {exc}") from None
    try:
        request = urllib.request.Request(url, headers=headers)
        with urllib.request.urlopen(request, timeout=timeout, context=context) as resp:
            body = resp.read()
    except urllib.error.HTTPError as exc:
        if exc.code == 403:  # no admin rights: a producer's rights are enough for the check
            exc.close()
            log.info("no rights to read the deduplication of %s; the writers check it", namespace)
            return False
        raise _admin_error(admin_url, topic, exc) from exc
    except (urllib.error.URLError, OSError) as exc:
        raise _admin_error(admin_url, topic, exc) from exc
    if body.strip() == b"true":
        return True
    request = urllib.request.Request(
        url, data=b"true", method="POST", headers={"Content-Type": "application/json", **headers}
    )
    try:
        with urllib.request.urlopen(request, timeout=timeout, context=context):
            pass
    except (urllib.error.URLError, OSError) as exc:
        raise PulsarSinkError(
            f"exactly-once writes to {topic} need broker deduplication, which is off for "
            f"namespace {namespace}, and turning it on through the option 'admin.url' "
            f"({admin_url}) failed ({_describe(exc)}): {_turn_on_hint(namespace)}"
        ) from exc
    log.warning("turned on deduplication for namespace %s (exactly-once writes)", namespace)
    return True


def _admin_error(admin_url: str, topic: str, exc: OSError) -> PulsarSinkError:
    return PulsarSinkError(
        f"option 'admin.url' ({admin_url}): reading the deduplication setting of "
        f"{namespace_of(topic)} failed ({_describe(exc)}); give the broker's HTTP admin URL, "
        "or leave the option out (the writers then check deduplication themselves)"
    )


def deduplication_off_error(topic: str) -> PulsarSinkError:
    """The error of a writer that found deduplication off: the broker did not report the
    sequence id its producer had just stored."""
    namespace = namespace_of(topic)
    return PulsarSinkError(
        f"exactly-once writes to {topic} need broker deduplication, and it is off (the broker "
        f"did not keep the producer's last sequence id): {_turn_on_hint(namespace)}"
    )


async def hold_topic(client: Client, topic: str, subscription: str) -> None:
    """Create the durable subscription ``subscription`` (option ``sinkSubscription``) on
    ``topic`` unless it exists, at the end of the topic: the broker then neither deletes the
    topic as inactive (it has a subscription) nor trims the rows written after it (they are
    not acknowledged), as Pulsar does for any durable subscription."""
    try:
        consumer = await client.subscribe(
            topic,
            subscription,
            consumer_type=ConsumerType.Shared,  # downstream consumers may share it
            receiver_queue_size=0,
            initial_position=InitialPosition.Latest,
        )
    except PulsarException as exc:
        raise PulsarSinkError(
            f"option 'sinkSubscription': creating the durable subscription {subscription!r} "
            f"on {topic}, which keeps the topic and the rows written to it, failed: {exc}. "
            "Grant the role consume permission on the topic, or set sinkSubscription to '' "
            "and keep the topic yourself (a retention policy and an inactive-topic policy)"
        ) from exc
    await consumer.close()


def _describe(exc: OSError) -> str:
    """An HTTP error with the broker's reason (401: the credentials, 403: the role's rights)."""
    if not isinstance(exc, urllib.error.HTTPError):
        return str(exc)
    try:
        reason = json.loads(exc.read() or b"{}").get("reason")
    except (ValueError, AttributeError, OSError):
        reason = None
    finally:
        exc.close()
    return f"HTTP {exc.code}: {reason or exc.reason}"
