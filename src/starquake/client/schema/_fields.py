"""Field types of :class:`~starquake.client.schema.Record`: the base class and scalars.

Every field knows its Avro type, the Python types its values may have, and its default. Unless
``required=True``, a field is nullable: its Avro type is the union ``["null", type]``. With
``required_default=True`` the generated Avro schema also states the field's default.

Fields and records share a small protocol (the ``_node_*`` methods of :class:`Node`) so that
containers (:class:`Array`, :class:`Map`) and records can hold either. The private names keep
working when a record declares a field called ``type`` or ``default``, which would hide the
public methods of that name on its instances; other modules call them through the ``node_*``
functions here.
"""

from __future__ import annotations

from typing import Any

__all__ = [
    "Boolean",
    "Bytes",
    "Double",
    "Field",
    "Float",
    "Integer",
    "Long",
    "Null",
    "String",
]

PythonType = type | tuple[type, ...]


def type_name(kind: Any) -> str:
    """The name of a type (or of anything else) in error messages."""
    return str(getattr(kind, "__name__", kind))


class Node:
    """What records and containers need from a field or a nested record."""

    _required: bool

    def _node_schema(self, names: set[str]) -> Any:
        raise NotImplementedError

    def _node_item_schema(self, names: set[str]) -> Any:
        """The form used for this node as an array item or a map value."""
        raise NotImplementedError

    def _node_default(self) -> Any:
        raise NotImplementedError

    def _node_states_default(self) -> bool:
        raise NotImplementedError

    def _node_python_type(self) -> PythonType:
        raise NotImplementedError

    def _node_validate(self, name: str, value: Any) -> Any:
        raise NotImplementedError

    def _node_from_wire(self, value: Any) -> Any:
        """``value`` as decoded from JSON or Avro, with records rebuilt from their dicts."""
        return value


def as_node(kind: Any) -> Node:
    """An item or value type of a container: a field, a record, or a record class."""
    if isinstance(kind, type) and issubclass(kind, Node):
        kind = kind()
    if not isinstance(kind, Node):
        raise TypeError(f"Argument {type_name(kind)} is not a Record or a Field")
    return kind


def node_schema(node: Node, names: set[str]) -> Any:
    """The Avro type of ``node`` as a record field (``names``: named types defined so far)."""
    return node._node_schema(names)


def node_item_schema(node: Node, names: set[str]) -> Any:
    """The Avro type of ``node`` as an array item or a map value."""
    return node._node_item_schema(names)


def node_default(node: Node) -> Any:
    """The value a new record gets for a field declared as ``node``."""
    return node._node_default()


def node_states_default(node: Node) -> bool:
    """Whether the record's Avro schema states the default of ``node``."""
    return node._node_states_default()


def node_is_required(node: Node) -> bool:
    """Whether a field declared as ``node`` is non-nullable."""
    return node._required


def node_python_type(node: Node) -> PythonType:
    """The Python type (or types) the values of ``node`` must have."""
    return node._node_python_type()


def node_validate(node: Node, name: str, value: Any) -> Any:
    """``value`` checked (and possibly converted) for the field ``name`` declared as ``node``."""
    return node._node_validate(name, value)


def node_from_wire(node: Node, value: Any) -> Any:
    """``value`` as decoded from JSON or Avro, with records rebuilt from their dicts."""
    return node._node_from_wire(value)


class Field(Node):
    """Base of the field types: a typed, optionally nullable attribute of a record.

    ``default`` is the value a new record gets (validated like any value), ``required=True``
    makes the field non-nullable, and ``required_default=True`` writes the default into the
    record's Avro schema.
    """

    def __init__(
        self, default: Any = None, required: bool = False, required_default: bool = False
    ) -> None:
        if default is not None:
            default = self.validate_type("default", default)
        self._default = default
        self._required = required
        self._required_default = required_default

    def type(self) -> str:
        """The Avro type name."""
        raise NotImplementedError

    def python_type(self) -> PythonType:
        """The Python type (or types) a value must have."""
        raise NotImplementedError

    def validate_type(self, name: str, val: Any) -> Any:
        """``val`` checked (and possibly converted) for the field ``name``; TypeError if wrong.

        ``None`` stands for the default unless the field is required.
        """
        if val is None and not self._required:
            return self.default()
        if not isinstance(val, self.python_type()):
            raise TypeError(
                f"Invalid type '{type(val)}' for field '{name}'. "
                f"Expected: {type_name(self.python_type())}"
            )
        return val

    def schema(self) -> Any:
        """The Avro schema of the field's type."""
        return self.schema_info(set())

    def schema_info(self, defined_names: set[str]) -> Any:
        """The Avro schema of the field's type, given the named types defined so far."""
        return self.type()

    def default(self) -> Any:
        """The default value."""
        return self._default

    def required_default(self) -> bool:
        """Whether the record's Avro schema states this field's default."""
        return self._required_default

    def __repr__(self) -> str:
        return (
            f"{type(self).__name__}(default={self._default!r}, required={self._required}, "
            f"required_default={self._required_default})"
        )

    def _node_schema(self, names: set[str]) -> Any:
        return self.schema_info(names)

    def _node_item_schema(self, names: set[str]) -> Any:
        return self.type()

    def _node_default(self) -> Any:
        return self.default()

    def _node_states_default(self) -> bool:
        return self.required_default()

    def _node_python_type(self) -> PythonType:
        return self.python_type()

    def _node_validate(self, name: str, value: Any) -> Any:
        return self.validate_type(name, value)


class Null(Field):
    """A field whose only value is ``None``."""

    def type(self) -> str:
        return "null"

    def python_type(self) -> PythonType:
        return type(None)

    def validate_type(self, name: str, val: Any) -> Any:
        if val is not None:
            raise TypeError(f"Field {name} is set to be None")
        return val


class Boolean(Field):
    """A ``bool`` field (Avro ``boolean``); its default is ``False`` unless given."""

    def type(self) -> str:
        return "boolean"

    def python_type(self) -> PythonType:
        return bool

    def default(self) -> Any:
        return False if self._default is None else self._default


class Integer(Field):
    """A 32-bit ``int`` field (Avro ``int``)."""

    def type(self) -> str:
        return "int"

    def python_type(self) -> PythonType:
        return int


class Long(Field):
    """A 64-bit ``int`` field (Avro ``long``)."""

    def type(self) -> str:
        return "long"

    def python_type(self) -> PythonType:
        return int


class Float(Field):
    """A single-precision number field (Avro ``float``); ints are accepted."""

    def type(self) -> str:
        return "float"

    def python_type(self) -> PythonType:
        return (float, int)


class Double(Field):
    """A double-precision number field (Avro ``double``); ints are accepted."""

    def type(self) -> str:
        return "double"

    def python_type(self) -> PythonType:
        return (float, int)


class Bytes(Field):
    """A ``bytes`` field (Avro ``bytes``); a ``str`` value is stored UTF-8 encoded."""

    def type(self) -> str:
        return "bytes"

    def python_type(self) -> PythonType:
        return (bytes, str)

    def validate_type(self, name: str, val: Any) -> Any:
        if val is None:
            return None
        if isinstance(val, str):
            return val.encode()
        if isinstance(val, bytearray | memoryview):
            return bytes(val)
        if not isinstance(val, bytes):
            raise TypeError(f"Invalid type '{type(val)}' for field '{name}'. Expected: bytes")
        return val


class String(Field):
    """A ``str`` field (Avro ``string``); a ``bytes`` value is stored UTF-8 decoded."""

    def type(self) -> str:
        return "string"

    def python_type(self) -> PythonType:
        return (str, bytes)

    def validate_type(self, name: str, val: Any) -> Any:
        if val is None and not self._required:
            return self.default()
        if not isinstance(val, str | bytes):
            raise TypeError(f"Invalid type '{type(val)}' for field '{name}'. Expected a string")
        return val.decode() if isinstance(val, bytes) else val
