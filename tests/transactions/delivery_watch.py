"""A thread that consumes topics for a whole campaign and notes every payload delivered."""

from __future__ import annotations

import contextlib
import threading
import time

from starquake import client as pulsar


class DeliveryWatcher(threading.Thread):
    """Receives and acknowledges on ``consumer`` until closed; ``delivered`` holds every
    payload seen. Broker restarts during the campaign are ridden out."""

    def __init__(self, name: str, client: pulsar.Client, consumer: pulsar.Consumer) -> None:
        super().__init__(name=name, daemon=True)
        self.client = client
        self.consumer = consumer
        self.delivered: set[bytes] = set()
        self.stop = threading.Event()

    def run(self) -> None:
        while not self.stop.is_set():
            try:
                msg = self.consumer.receive(500)
            except pulsar.Timeout:
                continue
            except pulsar.PulsarException:
                time.sleep(0.2)
                continue
            self.delivered.add(msg.data())
            with contextlib.suppress(pulsar.PulsarException):
                self.consumer.acknowledge(msg)

    def close(self) -> None:
        self.stop.set()
        self.join(30)
        with contextlib.suppress(Exception):
            self.client.close()
