"""Model-based test of the JetStream managed ledger against a real nats-server.

A hypothesis state machine appends, rolls over (tiny ledgers), acknowledges on a durable
cursor, stores cursors, trims, reopens through a new factory after a clean close, and takes
the managed ledger over from an owner that is still running (which is then fenced). After
every step the managed ledger holds exactly the appended entries, in order, but for whole
ledgers trimmed after every entry in them was acknowledged as stored; after a reopen or a
takeover the cursor is exactly what was last stored. Compactions (a compacted ledger of the
entries so far, committed while appends and rollovers store the ledger list too) leave the
committed compacted ledger readable whole by every later owner, and the replaced ones purged.
"""

from __future__ import annotations

import asyncio
import contextlib
import tempfile
import uuid
from collections.abc import Callable, Coroutine
from pathlib import Path
from typing import Any, TypeVar

from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.stateful import (
    RuleBasedStateMachine,
    initialize,
    invariant,
    rule,
    run_state_machine_as_test,
)

from starquake.cluster.js_factory import JetStreamLedgerFactory
from starquake.cluster.js_managed_ledger import JetStreamManagedLedger
from starquake.cluster.nodes import JetStreamNode
from starquake.storage import EARLIEST, LedgerFencedError, ManagedLedgerConfig, Position
from starquake.storage.cursor import ManagedCursorImpl

T = TypeVar("T")
CONFIG = ManagedLedgerConfig(max_entries_per_ledger=3, min_rollover_seconds=0)


def make_machine(url: str) -> type[RuleBasedStateMachine]:
    class JetStreamLedgerMachine(RuleBasedStateMachine):
        def __init__(self) -> None:
            super().__init__()
            self.loop = asyncio.new_event_loop()
            self.root = Path(tempfile.mkdtemp(prefix="sq-js-model-"))
            self.name = f"persistent://public/default/m-{uuid.uuid4().hex[:8]}"
            self.factories: list[JetStreamLedgerFactory] = []
            self.entries: list[tuple[Position, bytes]] = []
            self.stored: tuple[Position, list[tuple[Position, Position]]] | None = None
            self.counter = 0
            self.view: tuple[int, list[tuple[Position, bytes]]] | None = None
            self.replaced: list[int] = []

        def run(self, coro: Coroutine[Any, Any, T]) -> T:
            return self.loop.run_until_complete(coro)

        async def _open(self) -> JetStreamManagedLedger:
            factory = await JetStreamLedgerFactory.connect(
                [url],
                self.root / str(len(self.factories)),
                streams=2,
                config=CONFIG,
                cursor_flush_seconds=0,
            )
            self.factories.append(factory)
            return await factory.open(self.name)

        @initialize()
        def start(self) -> None:
            self.ml = self.run(self._open())

        @property
        def cursor(self) -> ManagedCursorImpl:
            return self.ml.open_cursor("sub", "earliest")

        def on_loop(self, call: Callable[[], T]) -> T:
            """``call()`` on the running loop (appends and trims start the writer task)."""

            async def main() -> T:
                return call()

            return self.run(main())

        @rule(count=st.integers(min_value=1, max_value=5))
        def append(self, count: int) -> None:
            for _ in range(count):
                data = f"e{self.counter}".encode()
                self.counter += 1
                position = self.on_loop(lambda: self.ml.append(data))  # noqa: B023
                assert not self.entries or position > self.entries[-1][0]
                self.entries.append((position, data))
            self.run(self.ml.drain())

        @rule(more=st.integers(min_value=0, max_value=4))
        def compact(self, more: int) -> None:
            if not self.entries:
                return
            ml, view = self.ml, list(self.entries)
            store = self.factories[-1].compacted_ledgers

            async def main() -> int:
                builder = await store.create(ml)
                await builder.append(view)
                reader = await builder.finish(view[-1][0])
                for _ in range(more):  # their list writes (rollovers) race the commit's
                    data = f"e{self.counter}".encode()
                    self.counter += 1
                    self.entries.append((ml.append(data), data))
                previous = await store.open_committed(ml)
                await store.commit(ml, reader)
                if previous is not None:
                    await store.delete(ml, previous)
                await ml.drain()
                return reader.ledger_id

            ledger_id = self.run(main())
            if self.view is not None:
                self.replaced.append(self.view[0])
            self.view = (ledger_id, view)

        @rule()
        def roll_over(self) -> None:
            self.on_loop(self.ml.roll_over)

        @rule(pick=st.integers(min_value=0, max_value=1000), cumulative=st.booleans())
        def acknowledge(self, pick: int, cumulative: bool) -> None:
            if not self.entries:
                return
            position = self.entries[pick % len(self.entries)][0]
            if cumulative:
                self.cursor.mark_delete(position)
            else:
                self.cursor.delete([position])

        @rule()
        def store_cursors(self) -> None:
            cursor = self.cursor
            self.run(self.factories[-1].flush_cursors())
            self.stored = (cursor.mark_delete_position, cursor.individually_deleted_ranges())

        @rule()
        def trim(self) -> None:
            self.on_loop(self.ml.trim)
            self.run(self.ml.drain())
            first = self.ml.ledgers()[0].ledger_id
            gone = [(p, d) for p, d in self.entries if p.ledger_id < first]
            cursor = self.ml.cursors.get("sub")
            if gone and cursor is not None:  # without a durable cursor, all may go
                assert gone[-1][0] <= cursor.mark_delete_position
                assert self.stored is not None and gone[-1][0] <= self.stored[0]
            self.entries = [(p, d) for p, d in self.entries if p.ledger_id >= first]

        @rule()
        def reopen_after_close(self) -> None:
            self.cursor  # exists before the close stores it  # noqa: B018
            self.run(self.factories[-1].close())
            cursor = self.ml.cursors["sub"]
            self.stored = (cursor.mark_delete_position, cursor.individually_deleted_ranges())
            self.ml = self.run(self._open())
            self._check_cursor()

        @rule()
        def take_over(self) -> None:
            old = self.ml
            self.ml = self.run(self._open())
            self._check_cursor()
            with contextlib.suppress(LedgerFencedError):
                self.on_loop(lambda: old.append(b"refused"))
            self.run(old.drain())
            assert old.fenced

        def _check_cursor(self) -> None:
            if self.stored is None:
                assert "sub" not in self.ml.cursors
                return
            cursor = self.ml.cursors["sub"]
            md, ranges = self.stored
            if md >= self.ml.position_before_first():
                assert cursor.mark_delete_position == md
            assert cursor.individually_deleted_ranges() == [
                r for r in ranges if r[1] > cursor.mark_delete_position
            ]

        @invariant()
        def contents(self) -> None:
            entries = self.run(self.ml.read_entries(EARLIEST, 10_000))
            assert [(e.position, bytes(e.data)) for e in entries] == self.entries
            assert self.ml.number_of_entries == len(self.entries)

        @invariant()
        def compacted(self) -> None:
            factory = self.factories[-1] if self.factories else None
            if factory is None:
                return
            reader = self.run(factory.compacted_ledgers.open_committed(self.ml))
            if self.view is None:
                assert reader is None
                return
            assert reader is not None and reader.ledger_id == self.view[0]
            records = self.run(reader.read_from(Position(-1, -1), 10_000))
            assert [(r.position, bytes(r.data or b"")) for r in records] == self.view[1]
            for ledger_id in self.replaced[-2:]:  # purged once the new one is committed
                index, _ = self.run(factory.ledgers.scan(ledger_id))
                assert index.sequences == [], ledger_id

        def teardown(self) -> None:
            async def close_all() -> None:
                for factory in self.factories:
                    await factory.close()
                me = asyncio.current_task()
                left = [task for task in asyncio.all_tasks() if task is not me]
                for task in left:  # the closed clients' readers, ending
                    task.cancel()
                await asyncio.gather(*left, return_exceptions=True)

            self.run(close_all())
            self.loop.close()

    return JetStreamLedgerMachine


def test_js_managed_ledger_model(jetstream_node: JetStreamNode) -> None:
    run_state_machine_as_test(
        make_machine(jetstream_node.url),
        settings=settings(
            max_examples=15,
            stateful_step_count=20,
            deadline=None,
            suppress_health_check=[HealthCheck.too_slow],
        ),
    )
