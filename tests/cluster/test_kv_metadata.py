"""The metadata store on a JetStream key-value bucket, against real nats-server nodes:
versioned compare-and-set as ZooKeeper's, children listing, watches, any path as a key, and
a value written before a node's kill -9 still there from the other nodes."""

from __future__ import annotations

import asyncio
import uuid
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from starquake.cluster.kv_metadata import (
    BadVersionError,
    JetStreamMetadataStore,
    key_to_path,
    path_to_key,
)
from starquake.cluster.nodes import JetStreamNode, jetstream_nodes
from starquake.storage import StorageError

# A new three-node JetStream cluster elects its leaders first: seconds idle, minutes on a
# heavily loaded machine.
CLUSTER_FORMING_SECONDS = 120.0

_VALID_KEY = set("-/_=.abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789")

_segments = st.lists(st.text(max_size=12), min_size=1, max_size=6)


@given(_segments)
def test_any_path_round_trips_through_a_valid_key(segments: list[str]) -> None:
    path = "/" + "/".join(segments)
    if path == "/":
        return
    key = path_to_key(path)
    assert set(key) <= _VALID_KEY and not key.startswith(".") and not key.endswith(".")
    assert ".." not in key
    assert key_to_path(key) == path


@given(_segments, _segments)
def test_distinct_paths_get_distinct_keys(a: list[str], b: list[str]) -> None:
    pa, pb = "/" + "/".join(a), "/" + "/".join(b)
    if "/" in (pa, pb) or pa == pb:
        return
    assert path_to_key(pa) != path_to_key(pb)


def test_a_topic_path_is_readable_as_a_key() -> None:
    path = "/managed-ledgers/public/default/persistent/orders-partition-1"
    assert path_to_key(path) == "managed-ledgers.public.default.persistent.orders-partition-1"
    assert path_to_key("/topics/persistent://public/default/a_b") == (
        "topics.persistent_3a._.public.default.a_5fb"
    )


def _run(coro: object) -> object:
    return asyncio.run(coro)  # type: ignore[arg-type]


def test_versions_and_compare_and_set(jetstream_node: JetStreamNode) -> None:
    base = f"/t{uuid.uuid4().hex[:8]}"

    async def scenario() -> None:
        store = await JetStreamMetadataStore.connect([jetstream_node.url], bucket="meta_cas")
        try:
            assert await store.get_versioned(f"{base}/a") is None
            v1 = await store.put(f"{base}/a", b"one", expected_version=0)
            with pytest.raises(BadVersionError):
                await store.put(f"{base}/a", b"again", expected_version=0)
            v2 = await store.put(f"{base}/a", b"two", expected_version=v1)
            assert v2 > v1
            with pytest.raises(BadVersionError):
                await store.put(f"{base}/a", b"stale", expected_version=v1)
            assert await store.get_versioned(f"{base}/a") == (b"two", v2)
            with pytest.raises(BadVersionError):
                await store.delete(f"{base}/a", expected_version=v1)
            await store.delete(f"{base}/a", expected_version=v2)
            assert await store.get_versioned(f"{base}/a") is None
            # re-created after a delete, only where absence is expected
            v3 = await store.put(f"{base}/a", b"three", expected_version=0)
            assert await store.get_versioned(f"{base}/a") == (b"three", v3)
            await store.put(f"{base}/a", b"four")  # unconditional
            assert (await store.get_versioned(f"{base}/a") or (b"", 0)).value == b"four"
        finally:
            await store.close()

    _run(scenario())


def test_children_and_watches(jetstream_node: JetStreamNode) -> None:
    base = f"/w{uuid.uuid4().hex[:8]}"

    async def scenario() -> None:
        store = await JetStreamMetadataStore.connect([jetstream_node.url], bucket="meta_watch")
        other = await JetStreamMetadataStore.connect([jetstream_node.url], bucket="meta_watch")
        seen: list[tuple[str, bytes | None]] = []
        try:
            await store.put(f"{base}/tenants/a", b"1")
            await store.put(f"{base}/tenants/b/ns1", b"2")
            await store.put(f"{base}/other", b"3")
            assert await store.list_children(f"{base}/tenants") == ["a", "b"]
            assert await store.list_children(f"{base}/none") == []
            await store.watch(f"{base}/tenants", lambda p, v, _: seen.append((p, v)))
            await other.put(f"{base}/tenants/c", b"4")
            await other.delete(f"{base}/tenants/a")
            deadline = asyncio.get_running_loop().time() + 10
            want = {(f"{base}/tenants/c", b"4"), (f"{base}/tenants/a", None)}
            while not want <= set(seen):
                assert asyncio.get_running_loop().time() < deadline, seen
                await asyncio.sleep(0.02)
            assert (f"{base}/tenants/b/ns1", b"2") in seen  # the current values first
            assert all(not p.startswith(f"{base}/other") for p, _ in seen)
        finally:
            await store.close()
            await other.close()

    _run(scenario())


def test_listings_see_every_write_made_before_them(jetstream_node: JetStreamNode) -> None:
    """A listing right after writes holds them all, however many, deleted ones left out
    (a listing through the key-value client's watch came back empty now and then under load:
    it guessed the end of the current values before they arrived)."""
    base = f"/l{uuid.uuid4().hex[:8]}"

    async def scenario() -> None:
        store = await JetStreamMetadataStore.connect([jetstream_node.url], bucket="meta_list")
        try:
            names: set[str] = set()
            for i in range(60):
                await store.put(f"{base}/c{i}/leaf", b"x")
                names.add(f"c{i}")
                if i % 7 == 3:
                    await store.delete(f"{base}/c{i}/leaf")
                    names.discard(f"c{i}")
                assert set(await store.list_children(base)) == names, i
            # more than one batch of a listing
            await asyncio.gather(*(store.put(f"{base}/many/k{i}", b"v") for i in range(1200)))
            assert len(await store.list_children(f"{base}/many")) == 1200
        finally:
            await store.close()

    _run(scenario())


def test_an_unreachable_store_is_one_clear_error() -> None:
    async def scenario() -> None:
        with pytest.raises(StorageError, match="unavailable"):
            await JetStreamMetadataStore.connect(["nats://127.0.0.1:9"], give_up_after=1)

    _run(scenario())


def test_a_replicated_value_survives_a_node_kill(jetstream_trio: list[JetStreamNode]) -> None:
    urls = [node.url for node in jetstream_trio]

    async def write() -> int:
        store = await JetStreamMetadataStore.connect(
            urls, bucket="meta_r3", replicas=3, give_up_after=CLUSTER_FORMING_SECONDS
        )
        try:
            return await store.put("/admin/policies/public/default", b"{}", expected_version=0)
        finally:
            await store.close()

    version = _run(write())
    jetstream_trio[0].kill()

    async def read() -> object:
        store = await JetStreamMetadataStore.connect(urls[1:], bucket="meta_r3", replicas=3)
        try:
            return await store.get_versioned("/admin/policies/public/default")
        finally:
            await store.close()

    assert _run(read()) == (b"{}", version)


def test_a_bucket_made_with_one_copy_gets_more_and_then_survives_its_node(
    jetstream_trio: list[JetStreamNode],
) -> None:
    """Clusters made before the metadata was replicated have one-copy buckets: opening one
    with more replicas copies it to other nodes, so the kill of the node that held it alone
    loses nothing (a bucket is never scaled down)."""
    urls = [node.url for node in jetstream_trio]

    async def write() -> str:
        store = await JetStreamMetadataStore.connect(
            urls, bucket="meta_grow", replicas=1, give_up_after=CLUSTER_FORMING_SECONDS
        )
        try:
            await store.put("/admin/clusters/c1", b"one", expected_version=0)
        finally:
            await store.close()
        store = await JetStreamMetadataStore.connect(
            urls, bucket="meta_grow", replicas=3, give_up_after=CLUSTER_FORMING_SECONDS
        )
        try:
            info = await store._kv._js.stream_info("KV_meta_grow")
            assert info.config.num_replicas == 3
            deadline = asyncio.get_running_loop().time() + CLUSTER_FORMING_SECONDS
            while len(info.cluster.replicas or []) < 2 or not all(
                r.current for r in info.cluster.replicas
            ):
                assert asyncio.get_running_loop().time() < deadline, info.cluster
                await asyncio.sleep(0.2)
                info = await store._kv._js.stream_info("KV_meta_grow")
            return str(info.cluster.leader)
        finally:
            await store.close()

    leader = _run(write())
    (held_it,) = [node for node in jetstream_trio if node.name == leader]
    held_it.kill()
    others = [node.url for node in jetstream_trio if node is not held_it]

    async def read() -> object:
        store = await JetStreamMetadataStore.connect(
            others, bucket="meta_grow", replicas=3, give_up_after=CLUSTER_FORMING_SECONDS
        )
        try:
            deadline = asyncio.get_running_loop().time() + CLUSTER_FORMING_SECONDS
            while True:  # the survivors elect a leader for the bucket first
                try:
                    return await store.get("/admin/clusters/c1")
                except StorageError:
                    assert asyncio.get_running_loop().time() < deadline
                    await asyncio.sleep(0.5)
        finally:
            await store.close()

    assert _run(read()) == b"one"


def test_a_watch_goes_on_after_the_server_restarts(tmp_path: Path) -> None:
    (node,) = jetstream_nodes(1, tmp_path)
    node.start()

    async def scenario() -> None:
        store = await JetStreamMetadataStore.connect([node.url], bucket="meta_restart")
        seen: list[tuple[str, bytes | None]] = []
        try:
            await store.put("/r/a", b"1")
            await store.watch("/r", lambda p, v, _: seen.append((p, v)))
            await asyncio.to_thread(node.stop)
            await asyncio.to_thread(node.start)
            other = await JetStreamMetadataStore.connect([node.url], bucket="meta_restart")
            try:
                await other.put("/r/b", b"2")
                await other.delete("/r/a")
            finally:
                await other.close()
            # the consumer the server lost is replaced at the reconnection, not seconds later
            deadline = asyncio.get_running_loop().time() + 8
            while not {("/r/b", b"2"), ("/r/a", None)} <= set(seen):
                assert asyncio.get_running_loop().time() < deadline, seen
                await asyncio.sleep(0.02)
        finally:
            await store.close()

    try:
        _run(scenario())
    finally:
        node.stop()
