"""What a transaction-buffer snapshot saves a topic's next owner in cluster mode: one broker
process over one JetStream node; a topic gets ``--txns`` transactions (one message each, every
third aborted) and a snapshot; the broker is killed with kill -9 and started again, and the
topic's load is measured (entries read, from the broker's log line; recovery time, from the
``transactionBufferStats`` recovery times). The same with the snapshot deleted from the
metadata store before the kill (a full replay). Medians of ``--runs`` (3) each, and ratios.

    .venv/bin/python bench/cluster_txn_recovery.py --txns 2000
"""

from __future__ import annotations

import argparse
import asyncio
import re
import statistics
import sys
import tempfile
import time
import uuid
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path[:0] = [str(ROOT / "tests")]

from admin_http import admin_json  # noqa: E402
from broker_process import BrokerProcess  # noqa: E402

from starquake import client as pulsar  # noqa: E402
from starquake.cluster.js_txn_snapshots import snapshot_path  # noqa: E402
from starquake.cluster.kv_metadata import JetStreamMetadataStore  # noqa: E402
from starquake.cluster.nodes import JetStreamNode, jetstream_nodes  # noqa: E402

STATS = "/admin/v3/transactions/transactionBufferStats/"
CLUSTER = f"c{uuid.uuid4().hex[:6]}"


def _stats(broker: BrokerProcess, topic: str) -> dict[str, int]:
    deadline = time.monotonic() + 60
    while True:
        status, body = admin_json(broker, "GET", STATS + topic.removeprefix("persistent://"))
        if status == 200:
            return dict(body)
        if time.monotonic() > deadline:
            raise RuntimeError(f"no buffer stats: {status} {body}")
        time.sleep(0.1)


def _drop_snapshot(node: JetStreamNode, topic: str) -> None:
    async def drop() -> None:
        store = await JetStreamMetadataStore.connect([node.url])
        try:
            await store.delete(snapshot_path(topic))
        finally:
            await store.close()

    asyncio.run(drop())


def one_run(base: Path, node: JetStreamNode, txns: int, snapshot: bool) -> tuple[int, int]:
    """(entries read, recovery ms) of the topic's load after kill -9 and a restart."""
    broker = BrokerProcess(
        base / f"b-{uuid.uuid4().hex[:6]}",
        f"metadataStoreUrl={node.url}",
        f"clusterName={CLUSTER}",
        "starquakeOwnershipLeaseSeconds=3",
        "transactionCoordinatorEnabled=true",
        log_level="INFO",
    )
    broker.start(timeout=60)
    try:
        topic = f"persistent://public/default/rec-{uuid.uuid4().hex[:6]}"
        client = pulsar.Client(broker.url, enable_transaction=True, operation_timeout_seconds=30)
        producer = client.create_producer(topic, batching_enabled=False)
        for i in range(txns):
            txn = client.new_transaction()
            producer.send(b"m", txn=txn)
            if i % 3 == 2:
                txn.abort()
            else:
                txn.commit()
        last = int(_stats(broker, topic)["lastSnapshotTimestamps"])
        time.sleep(max(0.0, last / 1000 + 5.2 - time.time()))
        txn = client.new_transaction()  # one more end: a snapshot of (nearly) everything
        producer.send(b"m", txn=txn)
        txn.commit()
        while int(_stats(broker, topic)["lastSnapshotTimestamps"]) <= last:
            time.sleep(0.05)
        client.close()
        if not snapshot:
            _drop_snapshot(node, topic)
        broker.kill()
        broker.start(timeout=60)
        stats = _stats(broker, topic)  # loads the topic
        found = re.findall(
            rf"transaction buffer of {topic} recovered \((\d+) entries read", broker.log()
        )
        return int(found[-1]), int(stats["recoverEndTime"]) - int(stats["recoverStartTime"])
    finally:
        broker.cleanup()


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--txns", type=int, default=2000, help="transactions on the topic")
    parser.add_argument("--runs", type=int, default=3)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="txn-recovery-") as scratch:
        base = Path(scratch)
        (node,) = jetstream_nodes(1, base / "jetstream")
        node.start()
        try:
            figures: dict[bool, list[tuple[int, int]]] = {True: [], False: []}
            for _ in range(args.runs):
                for snapshot in (True, False):
                    figures[snapshot].append(one_run(base, node, args.txns, snapshot))
        finally:
            node.stop()
    medians = {
        kind: (statistics.median(r for r, _ in runs), statistics.median(ms for _, ms in runs))
        for kind, runs in figures.items()
    }
    for kind, label in ((True, "from the snapshot"), (False, "full replay")):
        read, ms = medians[kind]
        print(f"{label:18} entries read {read:7.0f}   recovery {ms:6.0f} ms   runs {figures[kind]}")
    full_read, full_ms = medians[False]
    snap_read, snap_ms = medians[True]
    print(
        f"full replay / snapshot: entries read x{full_read / max(snap_read, 1):.0f}, "
        f"recovery time x{full_ms / max(snap_ms, 1):.1f}"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
