"""Scraping ``/metrics`` in tests: the samples parsed with prometheus_client's own parser."""

from __future__ import annotations

import threading
import time
import urllib.request
from collections.abc import Callable

import pulsar
from prometheus_client.parser import text_string_to_metric_families
from prometheus_client.samples import Sample

from starquake.broker.embedded import EmbeddedBroker


class Scrape:
    """One scrape of ``/metrics``: its samples by sample name."""

    def __init__(self, broker: EmbeddedBroker, path: str = "/metrics") -> None:
        with urllib.request.urlopen(f"{broker.web_service_url}{path}", timeout=10) as resp:
            self.status = resp.status
            self.content_type = resp.headers["Content-Type"]
            text = resp.read().decode()
        self.families = {f.name: f for f in text_string_to_metric_families(text)}
        self.samples: dict[str, list[Sample]] = {}
        for family in self.families.values():
            for sample in family.samples:
                self.samples.setdefault(sample.name, []).append(sample)

    def value(self, name: str, **labels: str) -> float:
        """The value of the one sample of ``name`` carrying ``labels`` (and maybe others)."""
        found = [s for s in self.samples.get(name, []) if labels.items() <= s.labels.items()]
        assert len(found) == 1, f"{name}{labels}: {found}"
        return found[0].value

    def total(self, name: str) -> float:
        """The sum of every sample of ``name`` (0 when there are none)."""
        return sum(s.value for s in self.samples.get(name, []))


def wait_for_scrape(
    broker: EmbeddedBroker, check: Callable[[Scrape], bool], timeout: float = 20
) -> Scrape:
    """The first scrape that passes ``check`` (the last one after ``timeout`` seconds)."""
    deadline = time.monotonic() + timeout
    while True:
        scrape = Scrape(broker)
        if check(scrape) or time.monotonic() > deadline:
            return scrape
        time.sleep(0.1)


def produce(producer: pulsar.Producer, payloads: list[bytes]) -> None:
    """Send everything asynchronously and wait for every receipt."""
    done = threading.Event()
    results: list[pulsar.Result] = []
    lock = threading.Lock()

    def on_sent(result: pulsar.Result, _msg_id: pulsar.MessageId) -> None:
        with lock:
            results.append(result)
            if len(results) == len(payloads):
                done.set()

    for payload in payloads:
        producer.send_async(payload, on_sent)
    producer.flush()
    assert done.wait(30), f"{len(results)} of {len(payloads)} receipts"
    assert all(r == pulsar.Result.Ok for r in results)
