"""Checks of a write before it starts: the DataFrame's columns, the broker's deduplication."""

from __future__ import annotations

import json
import logging
import urllib.error
import urllib.request
from collections.abc import Mapping, Set
from typing import Any

from pyspark.sql.types import (
    BinaryType,
    DataType,
    LongType,
    MapType,
    StringType,
    StructType,
    TimestampNTZType,
    TimestampType,
)

from starquake.client.topics import namespace_of
from starquake.spark._options import PulsarOptionError, WriteOptions
from starquake.spark._runtime import admin_http

__all__ = ["PulsarSinkError", "check_schema", "ensure_deduplication"]

log = logging.getLogger("starquake.spark")

_ACCEPTED: dict[str, tuple[type[DataType], ...]] = {
    "value": (BinaryType, StringType),
    "__key": (StringType, BinaryType),
    "__eventTime": (TimestampType, TimestampNTZType, LongType),
    "__messageProperties": (MapType,),
    "__topic": (StringType,),
}
# Columns of the source that a write ignores, so that a read can be written back as it is.
_IGNORED = {"__messageId", "__publishTime"}


class PulsarSinkError(RuntimeError):
    """A write cannot go ahead (deduplication cannot be turned on, a topic is missing...)."""


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
                "__messageProperties and __topic (encode other fields into value, or write "
                "them as a record with the option schema.type)"
            )
        if not isinstance(f.dataType, accepted):
            raise PulsarOptionError(
                f"column {f.name!r} has type {f.dataType.simpleString()}; expected "
                + " or ".join(t.typeName() for t in accepted)
            )
        if isinstance(f.dataType, MapType) and not (
            isinstance(f.dataType.keyType, StringType)
            and isinstance(f.dataType.valueType, StringType)
        ):
            raise PulsarOptionError("column '__messageProperties' must be map<string,string>")
    if opts.topic is None and "__topic" not in names:
        raise PulsarOptionError("give the option 'topic' or a '__topic' column")


def ensure_deduplication(
    admin_url: str,
    topic: str,
    timeout: float = 30.0,
    client_args: Mapping[str, Any] | None = None,
) -> None:
    """Turn broker deduplication on for ``topic``'s namespace unless it is on already.

    ``client_args`` (the checked ``pulsar.client.*`` settings) give the TLS settings of an
    ``https://`` admin URL and the credentials sent."""
    namespace = namespace_of(topic)
    url = f"{admin_url}/admin/v2/namespaces/{namespace}/deduplication"
    try:
        context, headers = admin_http(admin_url, client_args or {})
    except ValueError as exc:  # a TLS file that cannot be used
        raise PulsarSinkError(f"cannot call the admin API at {admin_url}: {exc}") from None
    try:
        request = urllib.request.Request(url, headers=headers)
        with urllib.request.urlopen(request, timeout=timeout, context=context) as resp:
            body = resp.read()
        if body.strip() == b"true":
            return
        request = urllib.request.Request(
            url,
            data=b"true",
            method="POST",
            headers={"Content-Type": "application/json", **headers},
        )
        with urllib.request.urlopen(request, timeout=timeout, context=context):
            pass
    except (urllib.error.URLError, OSError) as exc:
        raise PulsarSinkError(
            f"exactly-once writes to {topic} need broker deduplication on namespace "
            f"{namespace}, and it could not be checked or turned on through {admin_url} "
            f"({_describe(exc)}). Turn it on yourself (POST true to {url}, or "
            "'namespaces set-deduplication --enable'), or write with the option "
            "exactlyOnce=false (at-least-once)."
        ) from exc
    log.warning("turned on deduplication for namespace %s (exactly-once writes)", namespace)


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
