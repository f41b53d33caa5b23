"""Helpers for tests that build the same record classes with Starquake and the official client.

A *builder* takes a module exposing the record API (``starquake.client.schema`` or the official
``pulsar.schema``) and returns classes built from it; calling it with both modules gives twin
classes whose schemas and payloads must agree.
"""

from __future__ import annotations

import enum
from collections.abc import Callable
from typing import Any

import pulsar.schema as official

import starquake.client.schema as ours

MODULES = (ours, official)


def definition(schema: Any) -> bytes:
    """The schema data a schema object of either library declares."""
    info = schema.schema_info()
    if isinstance(schema, ours.Schema):
        data: bytes = info.data
        return data
    text: str = info.schema()
    return text.encode("utf-8")


def twins(builder: Callable[[Any], Any]) -> tuple[Any, Any]:
    """``builder`` applied to our module and to the official one."""
    return builder(ours), builder(official)


def plain(value: Any) -> Any:
    """A library-neutral form of a decoded value: records as dicts of their fields (by the
    class's declared fields), enum members as their names, containers recursively."""
    if isinstance(value, ours.Record | official.Record):
        return {name: plain(getattr(value, name)) for name in type(value)._fields}
    if isinstance(value, enum.Enum):
        return ("enum", value.name)
    if isinstance(value, list):
        return [plain(item) for item in value]
    if isinstance(value, dict):
        return {key: plain(item) for key, item in value.items()}
    return value
