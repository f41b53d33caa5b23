"""Avro's naming rules for named types (records, enums, fixed), as the schema mappers use them."""

from __future__ import annotations

from typing import Any

__all__ = ["full_name", "reference_candidates"]


def full_name(schema: dict[str, Any], namespace: str) -> tuple[str, str]:
    """The full name of a named type declared in ``namespace``, and the namespace its own
    fields are in."""
    name = str(schema.get("name", ""))
    if "." in name:
        return name, name.rpartition(".")[0]
    space = schema.get("namespace")
    space = namespace if space is None else str(space)
    return (f"{space}.{name}" if space else name), space


def reference_candidates(name: str, namespace: str) -> tuple[str, ...]:
    """The full names a reference to ``name`` from ``namespace`` may mean, the first first."""
    return (f"{namespace}.{name}" if namespace else name, name)
