"""Field types with structure: enums, arrays and maps."""

from __future__ import annotations

import enum
from typing import Any

from starquake.client.schema._fields import (
    Field,
    PythonType,
    as_node,
    node_from_wire,
    node_item_schema,
    node_python_type,
    type_name,
)

__all__ = ["Array", "CustomEnum", "Map"]


class CustomEnum(Field):
    """A field holding a member of ``enum_type`` (Avro ``enum`` of the member names).

    A value may be given as a member, a member name or a member value.
    """

    def __init__(
        self,
        enum_type: type[enum.Enum],
        default: Any = None,
        required: bool = False,
        required_default: bool = False,
    ) -> None:
        if not (isinstance(enum_type, type) and issubclass(enum_type, enum.Enum)):
            raise TypeError(f"{type_name(enum_type)} is not a valid Enum type")
        self.enum_type = enum_type
        self.values: dict[Any, enum.Enum] = {m.value: m for m in enum_type.__members__.values()}
        super().__init__(default, required, required_default)

    def type(self) -> str:
        return "enum"

    def python_type(self) -> PythonType:
        return self.enum_type

    def validate_type(self, name: str, val: Any) -> Any:
        if val is None:
            return None
        members = self.enum_type.__members__
        if type(val) is str:
            if val not in members:
                raise TypeError(
                    f"Invalid enum value '{val}' for field '{name}'. Expected: {list(members)}"
                )
            return members[val]
        if type(val) is int:
            if val not in self.values:
                raise TypeError(
                    f"Invalid enum value '{val}' for field '{name}'. Expected: {list(self.values)}"
                )
            return self.values[val]
        if not isinstance(val, self.enum_type):
            raise TypeError(
                f"Invalid type '{type(val)}' for field '{name}'. "
                f"Expected: {self.enum_type.__name__}"
            )
        return val

    def schema_info(self, defined_names: set[str]) -> Any:
        name = self.enum_type.__name__
        if name in defined_names:
            return name
        defined_names.add(name)
        return {"type": "enum", "name": name, "symbols": [m.name for m in self.enum_type]}


class Array(Field):
    """A ``list`` field whose items are of the field or record type ``array_type``."""

    def __init__(
        self,
        array_type: Any,
        default: Any = None,
        required: bool = False,
        required_default: bool = False,
    ) -> None:
        self.array_type: Any = as_node(array_type)
        super().__init__(default=default, required=required, required_default=required_default)

    def type(self) -> str:
        return "array"

    def python_type(self) -> PythonType:
        return list

    def validate_type(self, name: str, val: Any) -> Any:
        if val is None:
            return None
        super().validate_type(name, val)
        item_type = node_python_type(self.array_type)
        for item in val:
            if not isinstance(item, item_type):
                raise TypeError(
                    f"Array field {name} items should all be of type {type_name(item_type)}"
                )
        return val

    def schema_info(self, defined_names: set[str]) -> Any:
        return {"type": "array", "items": node_item_schema(self.array_type, defined_names)}

    def _node_item_schema(self, names: set[str]) -> Any:
        return self.schema_info(names)

    def _node_from_wire(self, value: Any) -> Any:
        if isinstance(value, list):
            return [node_from_wire(self.array_type, item) for item in value]
        return value


class Map(Field):
    """A ``dict`` field with ``str`` keys and values of the field or record type ``value_type``."""

    def __init__(
        self,
        value_type: Any,
        default: Any = None,
        required: bool = False,
        required_default: bool = False,
    ) -> None:
        self.value_type: Any = as_node(value_type)
        super().__init__(default=default, required=required, required_default=required_default)

    def type(self) -> str:
        return "map"

    def python_type(self) -> PythonType:
        return dict

    def validate_type(self, name: str, val: Any) -> Any:
        if val is None:
            return None
        super().validate_type(name, val)
        value_type = node_python_type(self.value_type)
        for key, item in val.items():
            if not isinstance(key, str):
                raise TypeError(f"Map keys for field {name} should all be strings")
            if not isinstance(item, value_type):
                raise TypeError(
                    f"Map values for field {name} should all be of type {type_name(value_type)}"
                )
        return val

    def schema_info(self, defined_names: set[str]) -> Any:
        return {"type": "map", "values": node_item_schema(self.value_type, defined_names)}

    def _node_item_schema(self, names: set[str]) -> Any:
        return self.schema_info(names)

    def _node_from_wire(self, value: Any) -> Any:
        if isinstance(value, dict):
            return {key: node_from_wire(self.value_type, item) for key, item in value.items()}
        return value
