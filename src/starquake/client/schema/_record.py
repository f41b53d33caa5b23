"""``Record``: a class whose field declarations generate an Avro record schema.

::

    class Point(Record):
        x = Integer(required=True)
        y = Integer(required=True)
        label = String(default="origin", required_default=True)

    Point.schema()  # the Avro record schema, as a dict
    Point(x=1, y=2) == Point(x=1, y=2)

The fields of a record class are the :class:`Field` instances, record instances (or record
classes) and ``enum.Enum`` classes assigned in its own class body, in declaration order. A record
class does not inherit the fields of the record class it derives from.

A record used as a field of another record is declared as an instance (``inner = Inner()``, or
``Inner(required=True)``), which accepts ``default``, ``required`` and ``required_default`` like
any field; a new outer record gets a copy of that instance as its value.

The schema generator names a record by its class name, in the namespace given by the class
attribute ``_avro_namespace`` (none by default); a named type (record or enum) appearing a second
time is referred to by name. With ``_sorted_fields = True`` the schema lists the fields in
alphabetical order; encoded JSON always lists them in declaration order.
"""

from __future__ import annotations

import copy
import enum
from collections.abc import Mapping
from typing import Any, ClassVar, TypeVar

from starquake.client.schema._complex import CustomEnum
from starquake.client.schema._fields import (
    Node,
    PythonType,
    node_default,
    node_from_wire,
    node_is_required,
    node_schema,
    node_states_default,
    node_validate,
)

__all__ = ["Record", "field_values", "record_from_mapping", "record_schema"]

R = TypeVar("R", bound="Record")

# Instance attributes that hold a record's settings as a field of another record.
_SETTINGS = frozenset({"_default", "_required", "_required_default"})


def _collect_fields(namespace: Mapping[str, Any]) -> dict[str, Node]:
    fields: dict[str, Node] = {}
    for name, value in namespace.items():
        if isinstance(value, type) and issubclass(value, enum.Enum):
            value = CustomEnum(value)
        elif isinstance(value, type) and issubclass(value, Record):
            value = value()
        if isinstance(value, Node):
            fields[name] = value
    return fields


def _schema_default(value: Any) -> Any:
    return value.name if isinstance(value, enum.Enum) else value


def _fresh(value: Any) -> Any:
    return copy.deepcopy(value) if isinstance(value, list | dict | Node) else value


class Record(Node):
    """Base class of user-defined records; see the module documentation.

    Keyword arguments set fields (a ``dict`` is accepted for a nested record, a list of dicts
    for an array of records, a dict of dicts for a map of records); other fields take their
    defaults. ``default``, ``required`` and ``required_default`` matter when the instance
    declares a field of another record. Assigning a value to a field validates it (TypeError
    when of the wrong type); assigning an undeclared attribute raises AttributeError.

    Two records are equal when they declare the same fields with equal values.
    """

    _avro_namespace: ClassVar[str | None] = None
    _sorted_fields: ClassVar[bool] = False
    _fields: ClassVar[dict[str, Node]] = {}
    _default: Any
    _required_default: bool

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        cls._fields = _collect_fields(vars(cls))

    def __init__(
        self,
        default: Any = None,
        required_default: bool = False,
        required: bool = False,
        **kwargs: Any,
    ) -> None:
        if type(self) is Record:  # as the official client: the base class has no fields
            raise AttributeError("'Record' object has no attribute '_fields'")
        self._settings(default, required_default, required)
        self._populate(kwargs)

    # --- construction ---------------------------------------------------------------------------

    def _settings(self, default: Any, required_default: bool, required: bool) -> None:
        object.__setattr__(self, "_default", default)
        object.__setattr__(self, "_required_default", required_default)
        object.__setattr__(self, "_required", required)

    def _populate(self, values: Mapping[str, Any]) -> None:
        for name, node in self._fields.items():
            if name in values:
                setattr(self, name, node_from_wire(node, values[name]))
            elif isinstance(node, Record):
                object.__setattr__(self, name, copy.deepcopy(node))
            else:
                object.__setattr__(self, name, _fresh(node_default(node)))

    @classmethod
    def _from_mapping(cls: type[R], values: Mapping[str, Any]) -> R:
        """A record of this class with the fields found in ``values`` (others default)."""
        record = cls.__new__(cls)
        record._settings(None, False, False)
        record._populate(values)
        return record

    def _field_values(self) -> dict[str, Any]:
        """The field values by name, in declaration order."""
        values = vars(self)
        return {name: values[name] for name in self._fields}

    # --- schema ---------------------------------------------------------------------------------

    @classmethod
    def schema(cls) -> dict[str, Any]:
        """The Avro schema of this record class, as a dict."""
        result: dict[str, Any] = cls._record_schema(set())
        return result

    @classmethod
    def schema_info(cls, defined_names: set[str]) -> Any:
        """The Avro schema of this record class, or its full name if already in
        ``defined_names`` (the set of named types defined so far, updated)."""
        return cls._record_schema(defined_names)

    @classmethod
    def _record_schema(cls, names: set[str]) -> Any:
        namespace = cls._avro_namespace
        full_name = cls.__name__ if namespace is None else f"{namespace}.{cls.__name__}"
        if full_name in names:
            return full_name
        names.add(full_name)
        schema: dict[str, Any] = {"type": "record", "name": cls.__name__}
        if namespace is not None:
            schema["namespace"] = namespace
        fields: list[dict[str, Any]] = []
        schema["fields"] = fields
        order = sorted(cls._fields) if cls._sorted_fields else list(cls._fields)
        for name in order:
            node = cls._fields[name]
            field_type = node_schema(node, names)
            if not node_is_required(node):
                field_type = ["null", field_type]
            if node_states_default(node):
                default = _schema_default(node_default(node))
                fields.append({"name": name, "default": default, "type": field_type})
            else:
                fields.append({"name": name, "type": field_type})
        return schema

    # --- as a field of another record -----------------------------------------------------------

    def type(self) -> str:
        """The record's type name (its class name)."""
        return type(self).__name__

    def python_type(self) -> PythonType:
        """The record's class."""
        return type(self)

    def validate_type(self, name: str, val: Any) -> Any:
        """``val`` checked as the value of a field ``name`` declared by this instance."""
        return self._node_validate(name, val)

    def default(self) -> Any:
        """The default given to this instance as a field declaration."""
        return self._default

    def required_default(self) -> bool:
        """Whether an outer record's Avro schema states this field's default."""
        return bool(self._required_default)

    def _node_schema(self, names: set[str]) -> Any:
        return type(self)._record_schema(names)

    def _node_item_schema(self, names: set[str]) -> Any:
        return type(self)._record_schema(names)

    def _node_default(self) -> Any:
        return self._default

    def _node_states_default(self) -> bool:
        return bool(self._required_default)

    def _node_python_type(self) -> PythonType:
        return type(self)

    def _node_validate(self, name: str, value: Any) -> Any:
        if value is None and not self._required:
            return self._default
        if not isinstance(value, type(self)):
            raise TypeError(
                f"Invalid type '{type(value)}' for sub-record field '{name}'. "
                f"Expected: {type(self).__name__}"
            )
        return value

    def _node_from_wire(self, value: Any) -> Any:
        if isinstance(value, dict):
            return type(self)._from_mapping(value)
        return value

    # --- attributes, comparison, display --------------------------------------------------------

    def __setattr__(self, key: str, value: Any) -> None:
        if key in _SETTINGS:
            object.__setattr__(self, key, value)
            return
        node = self._fields.get(key)
        if node is None:
            raise AttributeError(f"Cannot set undeclared field {key} on record")
        object.__setattr__(self, key, node_validate(node, key, value))

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, Record):
            return NotImplemented
        if self._fields.keys() != other._fields.keys():
            return False
        mine, theirs = vars(self), vars(other)
        return all(mine[name] == theirs[name] for name in self._fields)

    __hash__ = None  # type: ignore[assignment]

    def __repr__(self) -> str:
        shown = ", ".join(f"{name}={value!r}" for name, value in self._field_values().items())
        return f"{type(self).__name__}({shown})"

    __str__ = __repr__


def field_values(record: Record) -> dict[str, Any]:
    """The field values of ``record`` by name, in declaration order."""
    return record._field_values()


def record_schema(record_cls: type[Record]) -> Any:
    """The Avro schema of ``record_cls`` (even if it declares a field called ``schema``)."""
    return record_cls._record_schema(set())


def record_from_mapping(record_cls: type[R], values: Mapping[str, Any]) -> R:
    """A record of ``record_cls`` with the fields found in ``values`` (others default)."""
    return record_cls._from_mapping(values)
