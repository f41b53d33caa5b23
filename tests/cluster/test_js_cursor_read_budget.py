"""A cursor's reads bounded by bytes on JetStream, where reads past the entry cache wait for the
store: round after round over rolled-over ledgers and acknowledged gaps they return what one
unbounded read does, each stopping only once the next entry would go past the budget."""

from __future__ import annotations

import uuid
from collections.abc import Awaitable, Callable
from pathlib import Path

import pytest
from ledger_factories import run

from starquake.cluster.js_factory import JetStreamLedgerFactory
from starquake.cluster.nodes import JetStreamNode
from starquake.storage import ManagedLedgerConfig


@pytest.mark.parametrize("max_bytes", [1, 17, 60])
def test_bounded_cursor_reads_from_jetstream(
    jetstream_node: JetStreamNode, tmp_path: Path, max_bytes: int
) -> None:
    async def scenario(make: Callable[..., Awaitable[JetStreamLedgerFactory]]) -> None:
        # a tiny cache: the cursor's reads wait for JetStream
        config = ManagedLedgerConfig(
            cache_max_bytes=16, max_entries_per_ledger=5, min_rollover_seconds=0
        )
        factory = await make(config=config)
        ml = await factory.open(f"persistent://public/default/t-{uuid.uuid4().hex[:8]}")
        bounded = ml.open_cursor("bounded", "earliest")
        whole = ml.open_cursor("whole", "earliest")
        datas = [bytes([97 + i % 26]) * (1 + (i * 7) % 13) for i in range(23)]
        positions = []
        for data in datas:
            positions.append(ml.append(data))
            await ml.drain()
        gaps = [positions[3], positions[4], positions[11]]
        bounded.delete(gaps)
        whole.delete(gaps)
        expected = [bytes(e.data) for e in await whole.read_entries(100)]
        assert expected == [d for p, d in zip(positions, datas, strict=True) if p not in gaps]
        got: list[bytes] = []
        while batch := [bytes(e.data) for e in await bounded.read_entries(4, max_bytes)]:
            assert len(batch) <= 4
            assert sum(map(len, batch[:-1])) < max_bytes
            done = len(got) + len(batch)
            if len(batch) < 4 and done < len(expected):
                assert sum(map(len, batch)) + len(expected[done]) > max_bytes
            got.extend(batch)
        assert got == expected

    run(jetstream_node, tmp_path, scenario)
