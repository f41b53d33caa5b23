"""A BulkReader (what the Spark source's tasks and driver use) across broker restarts: a clean
stop and a kill -9 in the middle of a range, and every message of the range comes out once."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest
from broker_process import BrokerProcess, process_client

from starquake.client.asyncio import Client
from starquake.client.bulk import EARLIEST, BulkReader
from starquake.spark._plan import next_after

TOPIC = "persistent://public/default/bulk-restart"


@pytest.mark.parametrize("kill", [False, True], ids=["stop", "kill-9"])
def test_a_range_read_across_a_broker_restart_is_complete(tmp_path: Path, kill: bool) -> None:
    broker = BrokerProcess(tmp_path / "data")
    broker.start()
    try:
        client = process_client(broker.url)
        client.subscribe(TOPIC, "hold")  # keeps the data
        producer = client.create_producer(
            TOPIC, batching_enabled=True, batching_max_messages=50, block_if_queue_full=True
        )
        for i in range(3000):
            producer.send_async(f"m{i}".encode(), None)
        producer.flush()
        client.close()

        async def read() -> list[bytes]:
            ours = Client(broker.url, operation_timeout_seconds=30)
            try:
                reader = await BulkReader.create(
                    ours, TOPIC, EARLIEST, receiver_queue_size=100, wait_timeout=60
                )
                last = await reader.get_last_position()
                assert last is not None
                reader.end = next_after(last)
                values: list[bytes] = []
                restarted = False
                while not reader.done:
                    cols = await reader.read(100)
                    values.extend(v or b"" for v in cols.values)
                    if not restarted and len(values) >= 1000:
                        restarted = True
                        await asyncio.to_thread(broker.kill if kill else broker.stop)
                        await asyncio.to_thread(broker.start)
                await reader.close()
                return values
            finally:
                await ours.close()

        values = asyncio.run(read())
        assert values == [f"m{i}".encode() for i in range(3000)]
    finally:
        broker.cleanup()
