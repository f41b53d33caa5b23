"""Option and argument values that several commands parse the same way."""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING

import click

if TYPE_CHECKING:
    from click.decorators import FC

    from starquake.client import MessageId


def key_values(values: tuple[str, ...], option: str) -> dict[str, str]:
    """``KEY=VALUE`` pairs from a repeatable option whose values may also be comma-separated
    (``-p a=1,b=2 -p c=3``); a usage error naming ``option`` for an item without ``=``."""
    pairs: dict[str, str] = {}
    for value in values:
        for item in value.split(","):
            if not item.strip():
                continue
            key, sep, val = item.partition("=")
            if not sep or not key.strip():
                raise click.BadParameter(f"{item!r} is not KEY=VALUE", param_hint=option)
            pairs[key.strip()] = val
    return pairs


def split_values(values: tuple[str, ...]) -> list[str] | None:
    """Repeatable, comma-separated option values as one list (None when not given)."""
    if not values:
        return None
    return [item.strip() for value in values for item in value.split(",") if item.strip()]


def check_topic(topic: str) -> str:
    """The full name of ``topic`` (short forms allowed); a usage error if malformed."""
    from starquake.common.topic_name import TopicName

    try:
        return str(TopicName.parse(topic))
    except ValueError as exc:
        raise click.BadParameter(str(exc), param_hint="TOPIC") from None


def relative_seconds(text: str, hint: str | None = None) -> int:
    """A duration such as ``90``, ``10m`` or ``1h`` in seconds; a usage error (naming ``hint``
    when given) if malformed."""
    from starquake.admin.client import parse_relative_seconds

    try:
        return parse_relative_seconds(text)
    except ValueError as exc:
        raise click.BadParameter(str(exc), param_hint=hint) from None


def message_id_value(text: str, hint: str = "--messageId") -> tuple[int, int]:
    """A message id option as ``(ledger, entry)``: LEDGER:ENTRY, earliest or latest; a usage
    error naming ``hint`` if malformed."""
    from starquake.admin.client import parse_message_id

    try:
        return parse_message_id(text)
    except ValueError as exc:
        raise click.BadParameter(str(exc), param_hint=hint) from None


def start_message_id(text: str, hint: str = "--start-message-id") -> MessageId:
    """Where a reader starts: ``earliest``, ``latest`` or ``LEDGER:ENTRY``."""
    from starquake.client import MessageId

    ledger, entry = message_id_value(text, hint)
    if (ledger, entry) == (-1, -1):
        return MessageId.earliest
    if ledger >= 2**63 - 1:
        return MessageId.latest
    return MessageId(-1, ledger, entry)


def count_option(
    *names: str,
    default: int,
    help: str | None = None,
    minimum: int = 1,
    show_default: bool = True,
) -> Callable[[FC], FC]:
    """A whole-number option of at least ``minimum`` (``-n``, ``--num-...`` and the like)."""
    return click.option(
        *names,
        type=click.IntRange(min=minimum),
        default=default,
        show_default=show_default,
        help=help,
    )
