"""Option values that several commands parse the same way."""

from __future__ import annotations

import click


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
