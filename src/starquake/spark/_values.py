"""Decoded values made ready for Arrow: per Avro type, a function from the decoded Python value
to what ``pyarrow.array`` takes for the Spark type of :mod:`starquake.spark._typed`.

Avro payloads come out of the Avro decoder typed already; only ``uuid`` strings need turning
into text. JSON payloads are plain JSON: missing record fields take their Avro defaults (or
null when nullable), ``bytes`` and ``fixed`` are UTF-8 text, enums their JSON value as text,
``date`` a day count, timestamps a count of milli- or microseconds since the epoch, decimals
numbers or numeric text. A value that cannot be read raises ValueError.
"""

from __future__ import annotations

import datetime
import decimal
from collections.abc import Callable
from typing import Any

from starquake.spark._avro_names import full_name, reference_candidates

__all__ = ["avro_fixer", "json_reader"]

Convert = Callable[[Any], Any]

_EPOCH = datetime.datetime(1970, 1, 1, tzinfo=datetime.UTC)
_EPOCH_NAIVE = datetime.datetime(1970, 1, 1)
_EPOCH_DATE = datetime.date(1970, 1, 1)


def _lookup(named: dict[str, Any], name: str, namespace: str) -> Any:
    for candidate in reference_candidates(name, namespace):
        if candidate in named:
            return named[candidate]
    raise ValueError(f"unknown Avro type {name!r}")


# --- Avro -------------------------------------------------------------------------------------


def avro_fixer(schema: Any) -> Convert | None:
    """What Avro-decoded values of ``schema`` need before Arrow takes them (None: nothing)."""
    return _fixer(schema, {}, "")


def _fixer(schema: Any, named: dict[str, Any], namespace: str) -> Convert | None:
    if isinstance(schema, list):
        inner = [_fixer(b, named, namespace) for b in schema if b != "null"]
        return _nullable(inner[0]) if inner and inner[0] is not None else None
    if isinstance(schema, str):
        try:
            return _lookup(named, schema, namespace)  # type: ignore[no-any-return]
        except ValueError:
            return None  # a primitive type, or a named type that needs nothing
    if not isinstance(schema, dict):
        return None
    kind = schema.get("type")
    if kind == "string" and schema.get("logicalType") == "uuid":
        return str
    if kind == "array":
        item = _fixer(schema.get("items"), named, namespace)
        return None if item is None else (lambda v: [item(x) for x in v])
    if kind == "map":
        value = _fixer(schema.get("values"), named, namespace)
        return None if value is None else (lambda v: {k: value(x) for k, x in v.items()})
    if kind in ("record", "error"):
        full, space = full_name(schema, namespace)
        named[full] = None
        fields = [(f["name"], _fixer(f.get("type"), named, space)) for f in schema["fields"]]
        fixes = [(name, fix) for name, fix in fields if fix is not None]
        if not fixes:
            return None

        def fix_record(v: dict[str, Any]) -> dict[str, Any]:
            out = dict(v)
            for name, fix in fixes:
                out[name] = fix(out[name])
            return out

        named[full] = fix_record
        return fix_record
    if isinstance(kind, str | list | dict) and kind not in ("enum", "fixed"):
        return _fixer(kind, named, namespace)
    return None


def _nullable(convert: Convert) -> Convert:
    return lambda v: None if v is None else convert(v)


# --- JSON -------------------------------------------------------------------------------------


def json_reader(schema: Any) -> Convert:
    """The reader of JSON-decoded values of the Avro schema ``schema`` (ValueError when a
    value does not fit)."""
    return _reader(schema, {}, "", "value")


def _reader(schema: Any, named: dict[str, Any], namespace: str, where: str) -> Convert:
    if isinstance(schema, list):
        others = [b for b in schema if b != "null"]
        inner = _reader(others[0], named, namespace, where) if others else _null
        return _nullable(inner) if len(others) < len(schema) else inner
    if isinstance(schema, str):
        leaf = _LEAVES.get(schema)
        if leaf is not None:
            return _required(leaf, where)
        return _lookup(named, schema, namespace)  # type: ignore[no-any-return]
    kind = schema["type"]
    logical = schema.get("logicalType")
    found = _logical(kind, logical, where) if logical else None
    if found is None and kind in ("record", "error"):
        found = _record(schema, named, namespace)
    elif found is None and kind == "array":
        item = _reader(schema.get("items"), named, namespace, f"{where}[]")
        found = _required(lambda v: [item(x) for x in _typed(v, list)], where)
    elif found is None and kind == "map":
        value = _reader(schema.get("values"), named, namespace, f"{where}{{}}")
        found = _required(lambda v: {k: value(x) for k, x in _typed(v, dict).items()}, where)
    elif found is None and kind in ("enum", "fixed"):
        found = _required(_text if kind == "enum" else _bytes, where)
    elif found is None:
        return _reader(kind, named, namespace, where)
    if kind in ("enum", "fixed"):
        named[full_name(schema, namespace)[0]] = found
    return found


def _record(schema: dict[str, Any], named: dict[str, Any], namespace: str) -> Convert:
    full, space = full_name(schema, namespace)
    fields: list[tuple[str, Convert, bool, Any]] = []
    for f in schema["fields"]:
        name = str(f["name"])
        read = _reader(f.get("type"), named, space, name)
        fields.append((name, read, "default" in f, f.get("default")))

    def read_record(v: Any) -> dict[str, Any]:
        obj = _typed(v, dict)
        out: dict[str, Any] = {}
        for name, read, has_default, default in fields:
            if name in obj:
                out[name] = read(obj[name])
            elif has_default:
                out[name] = read(default)
            else:
                try:
                    out[name] = read(None)
                except ValueError:
                    raise ValueError(f"field {name!r} is missing and has no default") from None
        return out

    reader = _required(read_record, full)
    named[full] = reader
    return reader


def _logical(kind: Any, logical: str, where: str) -> Convert | None:
    if logical == "decimal" and kind in ("bytes", "fixed"):
        return _required(lambda v: decimal.Decimal(str(v)), where)
    if logical == "uuid" and kind == "string":
        return _required(_text, where)
    if logical == "date" and kind == "int":
        return _required(lambda v: _EPOCH_DATE + datetime.timedelta(days=_int(v)), where)
    units = {"timestamp-millis": 1000, "timestamp-micros": 1, "local-timestamp-millis": 1000}
    units["local-timestamp-micros"] = 1
    if kind == "long" and logical in units:
        scale = units[logical]
        base = _EPOCH_NAIVE if logical.startswith("local") else _EPOCH
        return _required(lambda v: base + datetime.timedelta(microseconds=_int(v) * scale), where)
    return None


def _required(convert: Convert, where: str) -> Convert:
    def read(v: Any) -> Any:
        if v is None:
            raise ValueError(f"{where}: null where the schema allows none")
        return convert(v)

    return read


def _typed(v: Any, kind: type) -> Any:
    if not isinstance(v, kind):
        raise ValueError(f"{type(v).__name__} {v!r:.40} where a {kind.__name__} belongs")
    return v


def _int(v: Any) -> int:
    if isinstance(v, bool) or not isinstance(v, int):
        raise ValueError(f"{v!r:.40} is not an integer")
    return v


def _null(v: Any) -> None:
    return None


def _text(v: Any) -> str:
    return v if isinstance(v, str) else str(v)


def _bytes(v: Any) -> bytes:
    return _typed(v, str).encode("utf-8")  # type: ignore[no-any-return]


def _number(v: Any) -> Any:
    if isinstance(v, bool) or not isinstance(v, int | float):
        raise ValueError(f"{v!r:.40} is not a number")
    return v


_LEAVES: dict[str, Convert] = {
    "boolean": lambda v: _typed(v, bool),
    "int": _int,
    "long": _int,
    "float": _number,
    "double": _number,
    "string": lambda v: _typed(v, str),
    "bytes": _bytes,
}
