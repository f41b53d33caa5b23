"""``starquake admin transactions ...``: the transactions' stats, with pulsar-admin's command
and option names."""

from __future__ import annotations

import click

from starquake.cli.admin_group import AdminContext, admin, admin_command

_UNITS = {"s": 1, "m": 60, "h": 3600, "d": 86_400, "w": 604_800, "y": 31_536_000}


def seconds_of(text: str) -> int:
    """A relative time as pulsar-admin takes it (``10``, ``10s``, ``5m``, ``3h``, ``2d``...)
    in seconds."""
    text = text.strip()
    unit = text[-1:].lower()
    number = text[:-1] if unit in _UNITS else text
    if not number.isdigit():
        raise click.BadParameter(f"{text!r} is not a time such as 10s, 5m, 3h or 2d")
    return int(number) * _UNITS.get(unit, 1)


@admin.group("transactions")
def transactions() -> None:
    """Transactions: coordinators, transactions, transaction buffers and pending acks."""


@admin_command(transactions, "coordinator-stats")
@click.option("-c", "--coordinator-id", type=int, default=None, help="one coordinator's id")
def coordinator_stats(ctx: AdminContext, coordinator_id: int | None) -> None:
    """Show the coordinators' stats (or one coordinator's)."""
    ctx.show(ctx.admin.transactions.coordinator_stats(coordinator_id))


@admin_command(transactions, "transaction-metadata")
@click.option("-m", "--most-sig-bits", type=int, required=True, help="the coordinator's id")
@click.option("-l", "--least-sig-bits", type=int, required=True, help="the transaction's")
def transaction_metadata(ctx: AdminContext, most_sig_bits: int, least_sig_bits: int) -> None:
    """Show an ongoing transaction's metadata."""
    ctx.show(ctx.admin.transactions.transaction_metadata(most_sig_bits, least_sig_bits))


@admin_command(transactions, "transaction-buffer-stats")
@click.option("-t", "--topic", required=True, help="the persistent topic")
def transaction_buffer_stats(ctx: AdminContext, topic: str) -> None:
    """Show a topic's transaction buffer."""
    ctx.show(ctx.admin.transactions.transaction_buffer_stats(topic))


@admin_command(transactions, "pending-ack-stats")
@click.option("-t", "--topic", required=True, help="the persistent topic")
@click.option("-s", "--sub-name", required=True, help="the subscription")
def pending_ack_stats(ctx: AdminContext, topic: str, sub_name: str) -> None:
    """Show a subscription's pending acks."""
    ctx.show(ctx.admin.transactions.pending_ack_stats(topic, sub_name))


@admin_command(transactions, "slow-transactions")
@click.option("-t", "--time", "timeout", required=True, help="open longer than this (10s, 5m)")
def slow_transactions(ctx: AdminContext, timeout: str) -> None:
    """Show the transactions open for longer than --time."""
    ctx.show(ctx.admin.transactions.slow_transactions(seconds_of(timeout) * 1000))
