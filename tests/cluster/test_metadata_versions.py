"""Every metadata store keeps the same versioned semantics, checked against one model.

A random sequence of reads, compare-and-set writes and deletes (expected version: any,
absent, the current one, or a stale one) runs against the SQLite store, the in-memory store,
the JetStream key-value store (a real nats-server) and the broker's configuration store over
JetStream (writes to JetStream, reads from its replica). Each must: apply a write exactly when
the expected version matches (else raise BadVersionError and change nothing), hand out a new
version greater than every version before, read back what the model holds, and list the same
children.
"""

from __future__ import annotations

import asyncio
import itertools
import threading
import uuid
from collections.abc import Callable, Coroutine, Iterator
from pathlib import Path
from typing import Any, TypeVar

import pytest
from hypothesis import settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, rule, run_state_machine_as_test

from starquake.cluster.config_store import JetStreamConfigurationStore
from starquake.cluster.kv_metadata import JetStreamMetadataStore
from starquake.cluster.nodes import JetStreamNode
from starquake.storage import (
    ABSENT,
    BadVersionError,
    MemoryMetadataStore,
    MetadataStore,
    SqliteMetadataStore,
    Versioned,
)

T = TypeVar("T")

_KEYS = ("a", "a/b", "a/c", "d")
_counter = itertools.count()


class SyncJetStream:
    """The awaitable JetStream store called from synchronous code (a loop on a thread)."""

    def __init__(self, url: str) -> None:
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._loop.run_forever, daemon=True)
        self._thread.start()
        self.store = self._run(JetStreamMetadataStore.connect([url], bucket="meta_model"))

    def _run(self, coro: Coroutine[Any, Any, T]) -> T:
        return asyncio.run_coroutine_threadsafe(coro, self._loop).result(10)

    def get_versioned(self, key: str) -> Versioned | None:
        return self._run(self.store.get_versioned(key))

    def put(self, key: str, value: bytes, expected_version: int | None = None) -> int:
        return self._run(self.store.put(key, value, expected_version))

    def delete(self, key: str, expected_version: int | None = None) -> None:
        self._run(self.store.delete(key, expected_version))

    def list_children(self, prefix: str) -> list[str]:
        return self._run(self.store.list_children(prefix))

    def close(self) -> None:
        self._run(self.store.close())
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(5)
        self._loop.close()


Store = MetadataStore | SyncJetStream


def run_model(make: Callable[[], tuple[Store, str]], examples: int) -> None:
    """Run the model against stores made by ``make`` (a store and the base path to use)."""

    class VersionedModel(RuleBasedStateMachine):
        def __init__(self) -> None:
            super().__init__()
            self.store, self.base = make()
            self.model: dict[str, Versioned] = {}
            self.seen: list[int] = [0]

        def _expected(self, key: str, choice: str) -> int | None:
            current = self.model.get(key)
            return {
                "any": None,
                "absent": ABSENT,
                "current": current.version if current else ABSENT,
                "stale": max(self.seen) + 7 if current is None else current.version - 1,
            }[choice]

        def _matches(self, key: str, expected: int | None) -> bool:
            current = self.model.get(key)
            return expected is None or (current.version if current else ABSENT) == expected

        @rule(
            key=st.sampled_from(_KEYS),
            value=st.binary(max_size=8),
            choice=st.sampled_from(["any", "absent", "current", "stale"]),
        )
        def put(self, key: str, value: bytes, choice: str) -> None:
            expected = self._expected(key, choice)
            if not self._matches(key, expected):
                with pytest.raises(BadVersionError):
                    self.store.put(f"{self.base}/{key}", value, expected)
                return
            version = self.store.put(f"{self.base}/{key}", value, expected)
            assert version > max(self.seen)
            self.seen.append(version)
            self.model[key] = Versioned(value, version)

        @rule(
            key=st.sampled_from(_KEYS),
            choice=st.sampled_from(["any", "absent", "current", "stale"]),
        )
        def delete(self, key: str, choice: str) -> None:
            expected = self._expected(key, choice)
            if not self._matches(key, expected):
                with pytest.raises(BadVersionError):
                    self.store.delete(f"{self.base}/{key}", expected)
                return
            self.store.delete(f"{self.base}/{key}", expected)
            self.model.pop(key, None)

        @invariant()
        def reads_match_the_model(self) -> None:
            for key in _KEYS:
                assert self.store.get_versioned(f"{self.base}/{key}") == self.model.get(key)
            top = sorted({key.split("/")[0] for key in self.model})
            assert self.store.list_children(self.base) == top
            below = sorted({key[2:] for key in self.model if key.startswith("a/")})
            assert self.store.list_children(f"{self.base}/a") == below

        def teardown(self) -> None:
            if not isinstance(self.store, (SyncJetStream, JetStreamConfigurationStore)):
                self.store.close()

    run_state_machine_as_test(
        VersionedModel,
        settings=settings(max_examples=examples, stateful_step_count=12, deadline=None),
    )


def test_memory_store_follows_the_model() -> None:
    run_model(lambda: (MemoryMetadataStore(), "/m"), 40)


def test_sqlite_store_follows_the_model(tmp_path: Path) -> None:
    def make() -> tuple[Store, str]:
        return SqliteMetadataStore(tmp_path / f"m{next(_counter)}.db"), "/m"

    run_model(make, 25)


@pytest.fixture(scope="module")
def jetstream_sync(jetstream_node: JetStreamNode) -> Iterator[SyncJetStream]:
    store = SyncJetStream(jetstream_node.url)
    try:
        yield store
    finally:
        store.close()


def test_jetstream_store_follows_the_model(jetstream_sync: SyncJetStream) -> None:
    run_model(lambda: (jetstream_sync, f"/m/{uuid.uuid4().hex[:8]}"), 20)


def test_configuration_store_follows_the_model(jetstream_node: JetStreamNode) -> None:
    store = JetStreamConfigurationStore.open([jetstream_node.url], ["/m"], bucket="meta_model")
    try:
        run_model(lambda: (store, f"/m/{uuid.uuid4().hex[:8]}"), 20)
    finally:
        store.close()
