"""A managed ledger's transaction-buffer snapshot in the metadata store on JetStream, against a
real nats-server: read back by whoever opens the managed ledger next; a previous owner's write
refused once the next owner wrote; no write once the managed ledger is closed here; gone with
the managed ledger, and not brought back by a write of the deleted instance."""

from __future__ import annotations

import uuid
from collections.abc import Awaitable, Callable
from pathlib import Path

import pytest
from ledger_factories import run

from starquake.cluster.js_factory import JetStreamLedgerFactory
from starquake.cluster.nodes import JetStreamNode
from starquake.storage import StorageError

Make = Callable[..., Awaitable[JetStreamLedgerFactory]]


def _name() -> str:
    return f"persistent://public/default/snap-{uuid.uuid4().hex[:8]}"


def test_the_next_owner_reads_the_snapshot_and_the_previous_one_cannot_overwrite_it(
    jetstream_node: JetStreamNode, tmp_path: Path
) -> None:
    async def scenario(make: Make) -> None:
        name = _name()
        first = await (await make()).open(name)
        assert await first.txn_snapshots.read() is None
        await first.txn_snapshots.write(b"one")
        await first.txn_snapshots.write(b"two")

        second = await (await make()).open(name)  # takes the managed ledger over
        assert await second.txn_snapshots.read() == b"two"
        await second.txn_snapshots.write(b"three")
        with pytest.raises(StorageError, match="changed by another broker"):
            await first.txn_snapshots.write(b"stale")
        assert await second.txn_snapshots.read() == b"three"

        second.close()
        with pytest.raises(StorageError, match="closed"):
            await second.txn_snapshots.write(b"after close")
        third = await (await make()).open(name)
        assert await third.txn_snapshots.read() == b"three"

    run(jetstream_node, tmp_path, scenario)


def test_a_deleted_managed_ledger_takes_its_snapshot_along(
    jetstream_node: JetStreamNode, tmp_path: Path
) -> None:
    async def scenario(make: Make) -> None:
        name = _name()
        factory = await make()
        ml = await factory.open(name)
        ml.append(b"entry")
        await ml.drain()
        await ml.txn_snapshots.write(b"snapshot")
        await factory.delete(name)
        with pytest.raises(StorageError):
            await ml.txn_snapshots.write(b"late write of the deleted instance")
        again = await factory.open(name)  # made again
        assert await again.txn_snapshots.read() is None

    run(jetstream_node, tmp_path, scenario)
