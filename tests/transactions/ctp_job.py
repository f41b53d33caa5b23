"""A consume-transform-produce job, run in its own process by the CTP kill campaign.

For each message of the input topic, in one transaction: send the transformed message
(``out|<input payload>``) to the output topic, acknowledge the input (individually, or
cumulatively), commit. A transaction that fails is aborted when it still can be, and the job
subscribes again (it goes on from the subscription's position); one whose end is unknown (the
broker was killed) is left to its coordinator, which ends it (at its timeout if it was still
open).

    python ctp_job.py URL INPUT OUTPUT individual|cumulative
"""

from __future__ import annotations

import contextlib
import sys
import time

from starquake import client as pulsar

TXN_TIMEOUT_MS = 4000
SUBSCRIPTION = "ctp"


def transform(data: bytes) -> bytes:
    """The job's output for an input payload."""
    return b"out|" + data


def _handles(
    client: pulsar.Client, source: str, sink: str, producer: pulsar.Producer | None = None
) -> tuple[pulsar.Consumer, pulsar.Producer]:
    """The job's consumer (subscribed anew) and its producer (made once)."""
    while True:
        try:
            consumer = client.subscribe(
                source,
                SUBSCRIPTION,
                initial_position=pulsar.InitialPosition.Earliest,
                receiver_queue_size=20,
            )
            if producer is None:
                producer = client.create_producer(sink, send_timeout_millis=15_000)
            return consumer, producer
        except pulsar.PulsarException:
            time.sleep(0.3)


def run(url: str, source: str, sink: str, cumulative: bool) -> None:
    client = pulsar.Client(url, enable_transaction=True, operation_timeout_seconds=10)
    consumer, producer = _handles(client, source, sink)
    while True:
        try:
            msg = consumer.receive(1000)
        except pulsar.Timeout:
            continue
        except pulsar.PulsarException:
            time.sleep(0.2)
            continue
        txn = None
        try:
            txn = client.new_transaction(timeout_ms=TXN_TIMEOUT_MS)
            producer.send(transform(msg.data()), txn=txn)
            if cumulative:
                consumer.acknowledge_cumulative(msg, txn=txn)
            else:
                consumer.acknowledge(msg, txn=txn)
            txn.commit()
        except pulsar.PulsarException:
            if txn is not None and txn.state == "OPEN":
                with contextlib.suppress(pulsar.PulsarException):
                    txn.abort()
            # Start again from the subscription's position: the messages fetched after this
            # one must not be processed first (a cumulative acknowledgment of one of them
            # would cover this one). Asking for a redelivery does not drop them while the
            # broker is down, in the official client as in ours, so the consumer is made anew.
            with contextlib.suppress(pulsar.PulsarException):
                consumer.close()
            time.sleep(0.2)
            consumer, producer = _handles(client, source, sink, producer)


if __name__ == "__main__":
    url, source, sink, mode = sys.argv[1:5]
    run(url, source, sink, mode == "cumulative")
