"""Checks of a decoded command before a connection handles it: its sub-command is present
and complete, and the request id an error reply can name."""

from __future__ import annotations

from starquake.protocol import commands
from starquake.protocol.errors import ServerError
from starquake.protocol.wire import pb

T = pb.BaseCommand

# BaseCommand numbers each sub-command field like its type.
_SUBCOMMAND_FIELD: dict[int, str] = {
    field.number: field.name
    for field in T.DESCRIPTOR.fields
    if field.message_type is not None and field.number in T.Type.values()
}
# Commands without fields, accepted without their (empty) sub-command.
_EMPTY_OK = frozenset({T.PING, T.PONG})


def invalid_command(command: T) -> str | None:
    """Why a command of a handled type cannot be handled, or None if it can."""
    field = _SUBCOMMAND_FIELD.get(command.type)
    if field is None:
        return None
    if not command.HasField(field):  # type: ignore[arg-type]
        if command.type in _EMPTY_OK:
            return None
        return f"{T.Type.Name(command.type)} without its {field} part"
    if not getattr(command, field).IsInitialized():
        return f"{T.Type.Name(command.type)} lacks required fields"
    return None


def request_id_of(command: T) -> int | None:
    """The ``request_id`` of a command's sub-command (None when it has none)."""
    for field, value in command.ListFields():
        if field.name == "type":
            continue
        for sub_field, sub_value in value.ListFields():
            if sub_field.name == "request_id":
                return int(sub_value)
    return None


def unsupported_reply(command: T) -> bytes | None:
    """The ERROR answering a command no handler serves (NotAllowed); None when the command
    carries no request id to name (the connection is closed instead)."""
    request_id = request_id_of(command)
    if request_id is None:
        return None
    name = T.Type.Name(command.type)
    return commands.error(request_id, ServerError.NotAllowedError, f"{name} is not supported")
