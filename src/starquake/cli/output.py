"""What the ``admin``, ``client`` and ``perf`` commands share: exit codes, error messages and
output as JSON (for scripts) or rich tables (for people).

Exit codes: 0 success, 1 the broker refused the request, 2 a usage error, 3 the broker cannot
be reached. rich is imported only when a table is drawn.
"""

from __future__ import annotations

import base64
import json
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from typing import IO, Any

import click

EXIT_REFUSED = 1
EXIT_USAGE = 2
EXIT_CANNOT_CONNECT = 3

OUTPUT_CHOICES = ("json", "table")


class CommandError(click.ClickException):
    """A failure reported as one ``error: ...`` line on stderr, with its own exit code."""

    exit_code = EXIT_REFUSED

    def show(self, file: IO[Any] | None = None) -> None:
        """Print ``error: <message>`` on stderr."""
        click.echo(f"error: {self.format_message()}", file=file or sys.stderr)


class CannotConnect(CommandError):
    """The broker could not be reached (exit code 3)."""

    exit_code = EXIT_CANNOT_CONNECT


@contextmanager
def admin_errors() -> Iterator[None]:
    """Turn the admin client's exceptions into exit codes: 1 with the broker's reason and the
    status for a refused request, 3 when it cannot connect, 2 for a malformed name."""
    from starquake.admin.client import AdminConnectError, PulsarAdminError

    try:
        yield
    except PulsarAdminError as exc:
        raise CommandError(f"{exc.reason} (HTTP {exc.status})") from None
    except AdminConnectError as exc:
        raise CannotConnect(str(exc)) from None
    except ValueError as exc:
        raise click.UsageError(str(exc)) from None


def default_output() -> str:
    """``table`` when a person reads stdout (a terminal), ``json`` when a script does."""
    return "table" if sys.stdout.isatty() else "json"


def print_json_line(value: Any) -> None:
    """One compact JSON value on a line of stdout."""
    sys.stdout.write(json.dumps(value, separators=(",", ":")) + "\n")
    sys.stdout.flush()


def utf8_or_none(data: bytes) -> str | None:
    """``data`` as text when it is valid UTF-8, else None."""
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError:
        return None


def payload_fields(data: bytes) -> dict[str, str | None]:
    """A message payload's JSON fields: ``payload`` (text, null if not UTF-8) and
    ``payloadBase64``."""
    return {"payload": utf8_or_none(data), "payloadBase64": base64.b64encode(data).decode("ascii")}


def hex_dump(data: bytes) -> list[str]:
    """``data`` as hex dump lines: per 16 bytes the offset, the bytes in hex and the printable
    characters."""
    lines = []
    for offset in range(0, len(data), 16):
        chunk = data[offset : offset + 16]
        hexes = " ".join(f"{b:02x}" for b in chunk)
        chars = "".join(chr(b) if 32 <= b < 127 else "." for b in chunk)
        lines.append(f"{offset:08x}  {hexes:<47}  |{chars}|")
    return lines


def print_raw_json(body: bytes) -> None:
    """A JSON body exactly as the broker answered it (nothing for an empty body)."""
    text = body.decode("utf-8", "replace").strip()
    if text:
        sys.stdout.write(text + "\n")
        sys.stdout.flush()


# --- tables ------------------------------------------------------------------------------------

# The columns shown for rows of nested objects (Pulsar's stats); the rest stay in the JSON.
PREFERRED_COLUMNS: dict[str, list[str]] = {
    "publishers": [
        "producerName",
        "producerId",
        "msgRateIn",
        "msgThroughputIn",
        "averageMsgSize",
        "accessMode",
        "address",
        "connectedSince",
    ],
    "subscriptions": [
        "type",
        "msgBacklog",
        "msgRateOut",
        "msgThroughputOut",
        "msgRateExpired",
        "unackedMessages",
        "consumers",
        "isDurable",
    ],
    "consumers": [
        "consumerName",
        "msgRateOut",
        "msgThroughputOut",
        "availablePermits",
        "unackedMessages",
        "address",
        "connectedSince",
    ],
    "partitions": [
        "msgRateIn",
        "msgRateOut",
        "msgInCounter",
        "msgOutCounter",
        "storageSize",
        "publishers",
        "subscriptions",
    ],
    "ledgers": ["ledgerId", "entries", "size", "offloaded"],
    "cursors": [
        "markDeletePosition",
        "readPosition",
        "messagesConsumedCounter",
        "cursorLedger",
        "state",
        "active",
    ],
}
_MAX_COLUMNS = 8


def _cell(value: Any) -> str:
    """A JSON value as table text: floats to 3 decimals, lists of names joined, lists and maps
    of objects as their count, other maps as compact JSON."""
    if value is None:
        return ""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, float):
        return f"{value:.3f}".rstrip("0").rstrip(".") if value else "0"
    if isinstance(value, list):
        if value and all(isinstance(v, dict) for v in value):
            return str(len(value))
        return ", ".join(_cell(v) for v in value)
    if isinstance(value, dict):
        if value and all(isinstance(v, dict) for v in value.values()):
            return str(len(value))
        return json.dumps(value, separators=(",", ":"))
    return str(value)


def _row_cell(value: Any) -> str:
    """A cell of a row table: a list of objects (a subscription's consumers) as its length."""
    if isinstance(value, list) and all(isinstance(v, dict) for v in value):
        return str(len(value))
    return _cell(value)


def _is_scalar(value: Any) -> bool:
    return not isinstance(value, (dict, list)) or (
        isinstance(value, list) and not any(isinstance(v, (dict, list)) for v in value)
    )


def _columns(name: str, rows: list[dict[str, Any]]) -> list[str]:
    keys: list[str] = []
    for row in rows:
        keys.extend(k for k in row if k not in keys)
    preferred = [k for k in PREFERRED_COLUMNS.get(name, []) if k in keys]
    if preferred:
        return preferred
    return [k for k in keys if all(_is_scalar(r.get(k)) for r in rows)][:_MAX_COLUMNS]


class Tables:
    """Draws values with rich on stdout."""

    def __init__(self) -> None:
        from rich.console import Console

        # on a terminal rich uses its width; into a file or a pipe, wide enough not to cut
        width = None if sys.stdout.isatty() else 200
        self.console = Console(width=width, soft_wrap=False, highlight=False)

    def _table(self, title: str | None = None) -> Any:
        from rich import box
        from rich.table import Table

        return Table(
            title=title,
            box=box.SIMPLE_HEAD,
            show_edge=False,
            title_justify="left",
            title_style="bold",
        )

    def names(self, header: str, names: list[Any]) -> None:
        """A list of names, one per row."""
        table = self._table()
        table.add_column(header)
        for name in names:
            table.add_row(_cell(name))
        self.console.print(table)

    def value(self, value: Any, title: str | None = None) -> None:
        """Any JSON value: scalars as text, objects as key/value rows followed by one table
        per nested list or map of objects (publishers, subscriptions, ledgers, ...)."""
        if isinstance(value, list):
            if value and all(isinstance(v, dict) for v in value):
                self.rows(title or "", value)
            else:
                self.names(title or "value", value)
            return
        if not isinstance(value, dict):
            self.console.print("(not set)" if value is None else _cell(value), markup=False)
            return
        table = self._table(title)
        table.add_column("field")
        table.add_column("value", overflow="fold")
        nested: list[tuple[str, Any]] = []
        for key, item in value.items():
            rows = item.values() if isinstance(item, dict) else item
            if isinstance(item, (dict, list)) and item and all(isinstance(v, dict) for v in rows):
                nested.append((key, item))
            else:
                table.add_row(key, _cell(item))
        if table.row_count:
            self.console.print(table)
        for key, item in nested:
            if isinstance(item, dict):
                self.named_rows(key, item)
            else:
                self.rows(key, item)

    def rows(self, name: str, rows: list[dict[str, Any]]) -> None:
        """A table of ``rows``, one column per key."""
        table = self._table(name or None)
        columns = _columns(name, rows)
        for column in columns:
            table.add_column(column)
        for row in rows:
            table.add_row(*(_row_cell(row.get(c)) for c in columns))
        self.console.print(table)

    def named_rows(self, name: str, rows: dict[str, dict[str, Any]]) -> None:
        """A table of ``rows`` by name: a ``name`` column, then one column per key."""
        table = self._table(name)
        columns = _columns(name, list(rows.values()))
        table.add_column("name")
        for column in columns:
            table.add_column(column)
        for key, row in rows.items():
            table.add_row(key, *(_row_cell(row.get(c)) for c in columns))
        self.console.print(table)
