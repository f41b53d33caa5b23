"""BulkReader ranges and admission control, over a topic with batches, single messages and
several ledgers: consecutive ranges, however they are cut, give every message exactly once,
in order; admission cuts at exactly the budget (hypothesis chooses the cuts and budgets)."""

from __future__ import annotations

import asyncio
import itertools
import logging
import random
from collections.abc import Iterator
from pathlib import Path

import pulsar
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from starquake.broker.embedded import EmbeddedBroker
from starquake.client import MessageId
from starquake.client.asyncio import Client
from starquake.client.bulk import EARLIEST, BulkReader, Position
from starquake.spark._admission import Admission, EntryCountsApi
from starquake.spark._plan import next_after

TOPIC = "persistent://public/default/bulk-ranges"


class Loaded:
    def __init__(self, broker: EmbeddedBroker, values: list[bytes], positions: list[Position]):
        self.broker = broker
        self.values = values
        self.positions = positions


def _position(mid_bytes: bytes) -> Position:
    mid = MessageId.deserialize(mid_bytes)
    return (mid.ledger_id(), mid.entry_id(), max(mid.batch_index(), 0))


@pytest.fixture(scope="module")
def loaded(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Loaded]:
    data: Path = tmp_path_factory.mktemp("bulk") / "data"
    with EmbeddedBroker(
        data, managedLedgerMaxEntriesPerLedger=4, managedLedgerMinLedgerRolloverTimeMinutes=0
    ) as broker:
        client = pulsar.Client(broker.service_url)
        client.subscribe(TOPIC, "hold")  # keeps every ledger
        rng = random.Random(7)
        sent = 0
        for _ in range(14):
            batched = rng.random() < 0.7
            producer = client.create_producer(
                TOPIC, batching_enabled=batched, batching_max_publish_delay_ms=1000
            )
            for _ in range(rng.randint(1, 9) if batched else 1):
                producer.send_async(f"v{sent}".encode(), None)
                sent += 1
            producer.flush()
            producer.close()
        client.close()
        values, positions = asyncio.run(_read(broker.service_url, EARLIEST, None))
        assert values == [f"v{i}".encode() for i in range(sent)]
        assert len({p[0] for p in positions}) >= 3  # several ledgers
        yield Loaded(broker, values, positions)


async def _read(
    url: str, start: Position, end: Position | None
) -> tuple[list[bytes], list[Position]]:
    client = Client(url)
    try:
        reader = await BulkReader.create(client, TOPIC, start, end, wait_timeout=10)
        if end is None:
            last = await reader.get_last_position()
            assert last is not None
            reader.end = next_after(last)
        values: list[bytes] = []
        positions: list[Position] = []
        while not reader.done:
            cols = await reader.read(7)
            values.extend(v or b"" for v in cols.values)
            positions.extend(_position(m) for m in cols.message_ids)
        await reader.close()
        return values, positions
    finally:
        await client.close()


def _cut_position(loaded: Loaded, index: int, virtual: bool) -> Position:
    """Where message ``index`` starts; ``virtual``: say it as "after the previous entry"."""
    if index >= len(loaded.positions):
        return next_after(loaded.positions[-1])
    here = loaded.positions[index]
    if virtual and index > 0 and here[2] == 0:
        return next_after(loaded.positions[index - 1])
    return here


@settings(
    max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(data=st.data())
def test_consecutive_ranges_give_every_message_once(loaded: Loaded, data: st.DataObject) -> None:
    n = len(loaded.values)
    cuts = sorted(data.draw(st.lists(st.integers(1, n - 1), max_size=6, unique=True)))
    bounds = (
        [EARLIEST]
        + [_cut_position(loaded, i, data.draw(st.booleans())) for i in cuts]
        + [next_after(loaded.positions[-1])]
    )
    edges = [0, *cuts, n]
    for k, (start, end) in enumerate(itertools.pairwise(bounds)):
        values, _ = asyncio.run(_read(loaded.broker.service_url, start, end))
        assert values == loaded.values[edges[k] : edges[k + 1]], (start, end)


async def _admit_all(
    url: str, budgets: list[int], last: Position, api: EntryCountsApi | None = None
) -> list[list[bytes]]:
    client = Client(url)
    admission = Admission(client, 10, api)
    batches: list[list[bytes]] = []
    start = EARLIEST
    end = next_after(last)
    try:
        for budget in budgets:
            cut = await admission.admit({TOPIC: start}, {TOPIC: end}, {TOPIC: last}, budget)
            values, _ = await _read(url, start, cut[TOPIC])
            batches.append(values)
            start = cut[TOPIC]
        return batches
    finally:
        await admission.close()
        await client.close()


@settings(
    max_examples=15, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(
    budgets=st.lists(st.integers(1, 12), min_size=1, max_size=12),
    endpoint=st.booleans(),
)
def test_admission_admits_exactly_the_budget(
    loaded: Loaded, budgets: list[int], endpoint: bool
) -> None:
    """Counted by reading the entries, or by the broker's entryCounts endpoint."""
    api = EntryCountsApi(loaded.broker.web_service_url, {}, 10) if endpoint else None
    batches = asyncio.run(_admit_all(loaded.broker.service_url, budgets, loaded.positions[-1], api))
    remaining = len(loaded.values)
    taken: list[bytes] = []
    for budget, batch in zip(budgets, batches, strict=True):
        assert len(batch) == min(budget, remaining)
        remaining -= len(batch)
        taken.extend(batch)
    assert taken == loaded.values[: len(taken)]


def test_entry_counts_endpoint_gives_the_rows_of_each_entry_without_payloads(
    loaded: Loaded,
) -> None:
    expected: dict[tuple[int, int], int] = {}
    for ledger, entry, _ in loaded.positions:
        expected[(ledger, entry)] = expected.get((ledger, entry), 0) + 1
    api = EntryCountsApi(loaded.broker.web_service_url, {}, 10)
    first = loaded.positions[0][:2]
    found = api.fetch(TOPIC, first, 1 << 40)
    assert [((c.ledger_id, c.entry_id), c.rows) for c in found] == list(expected.items())
    for budget in (1, 5, 17):  # stops at the first entry that completes the budget
        cut = api.fetch(TOPIC, first, budget)
        assert sum(c.rows for c in cut) >= budget
        assert sum(c.rows for c in cut[:-1]) < budget
        assert cut == found[: len(cut)]
    later = found[3]
    assert api.fetch(TOPIC, (later.ledger_id, later.entry_id), 1 << 40) == found[3:]
    # from the earliest position (before the first entry): every entry, no refusal
    assert api.fetch(TOPIC, EARLIEST[:2], 1 << 40) == found


def test_admission_from_the_earliest_position_uses_the_endpoint(
    loaded: Loaded, caplog: pytest.LogCaptureFixture
) -> None:
    """Not the fallback that reads every entry a second time (it logs a warning)."""
    api = EntryCountsApi(loaded.broker.web_service_url, {}, 10)
    with caplog.at_level(logging.WARNING, logger="starquake.spark"):
        batches = asyncio.run(
            _admit_all(loaded.broker.service_url, [3, 5], loaded.positions[-1], api)
        )
    assert [len(b) for b in batches] == [3, 5]
    assert not [r for r in caplog.records if "entryCounts" in r.getMessage()]
