"""Pulsar's option spelling on click: multi-letter short options (``-ss``, ``-db``, ``-time``)
and no guessing.

click declares ``-ss`` as an option of its own, but a token it does not know is split: with
``-s`` declared, an unknown ``-st`` becomes ``-s t`` and the following word a positional
argument (``perf consume -st Shared`` subscribed as ``t`` to a topic named ``Shared``). The
commands here check every token before click parses it: a token that looks like an option must
be one the command declares exactly (``--name=value`` allowed), so that an option Pulsar's tools
have and Starquake does not is a usage error, never a value or a topic name. Values glued to a
short option (``-n10``) are refused for the same reason; write ``-n 10``.
"""

from __future__ import annotations

import difflib
import re

import click

_NUMBER = re.compile(r"-\d+(\.\d*)?([eE][-+]?\d+)?")


def _value_counts(command: click.Command, ctx: click.Context) -> dict[str, int]:
    """Every option name of ``command`` and how many values follow it."""
    counts: dict[str, int] = {}
    for param in command.get_params(ctx):
        if not isinstance(param, click.Option):
            continue
        takes = 0 if param.is_flag or param.count else param.nargs
        for name in (*param.opts, *param.secondary_opts):
            counts[name] = takes
    return counts


def checked_args(command: click.Command, ctx: click.Context, args: list[str]) -> list[str]:
    """``args`` with ``-x=value`` split in two; NoSuchOption for a token that looks like an
    option ``command`` does not declare (stops at ``--``, and for a group at its sub-command)."""
    counts = _value_counts(command, ctx)
    out: list[str] = []
    rest = iter(args)
    for token in rest:
        if token == "--":
            out.append(token)
            out.extend(rest)
            break
        if not token.startswith("-") or token == "-" or _NUMBER.fullmatch(token):
            out.append(token)
            if isinstance(command, click.Group):  # the sub-command and its own arguments
                out.extend(rest)
                break
            continue
        name, eq, value = token.partition("=")
        if name not in counts:
            raise click.NoSuchOption(
                name, possibilities=difflib.get_close_matches(name, counts), ctx=ctx
            )
        if eq:
            if counts[name] == 0:
                raise click.BadOptionUsage(name, f"Option {name!r} does not take a value.", ctx)
            out.extend([name, value])
            continue
        out.append(token)
        for _ in range(counts[name]):
            following = next(rest, None)
            if following is not None:
                out.append(following)
    return out


class StrictCommand(click.Command):
    """A command whose options are matched exactly (see the module's documentation)."""

    def parse_args(self, ctx: click.Context, args: list[str]) -> list[str]:
        return super().parse_args(ctx, checked_args(self, ctx, args))


class StrictGroup(click.Group):
    """A group whose own options, and its sub-commands' and sub-groups', are matched exactly."""

    command_class = StrictCommand
    group_class = type  # sub-groups are StrictGroups too

    def parse_args(self, ctx: click.Context, args: list[str]) -> list[str]:
        return super().parse_args(ctx, checked_args(self, ctx, args))
