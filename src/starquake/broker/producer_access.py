"""Which producers a topic admits: Pulsar's producer access modes.

* ``Shared`` (0): any number of producers, unless an exclusive one holds the topic.
* ``Exclusive`` (1): admitted only when the topic has no producer; then it holds the topic.
* ``WaitForExclusive`` (2): like Exclusive, but instead of failing it waits (the broker answers
  PRODUCER_SUCCESS with ``producer_ready=false``) and is promoted, in arrival order, when the
  topic has no producer left; then a second PRODUCER_SUCCESS with ``producer_ready=true`` follows.
* ``ExclusiveWithFencing`` (3): always admitted; every other producer is disconnected and fenced:
  its attempts to come back fail with ``ProducerFenced``.

Each exclusive admission increments the topic epoch, sent back in PRODUCER_SUCCESS.
"""

from __future__ import annotations

import itertools
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING

from starquake.broker.errors import BrokerServiceError, ProducerBusyError
from starquake.protocol.enums import ProducerAccessMode
from starquake.protocol.errors import ServerError

if TYPE_CHECKING:
    from starquake.broker.producer import Producer


_GENERATED = itertools.count(1)


def generated_producer_name(prefix: str) -> str:
    """A name for a producer that brings none: ``prefix`` (the cluster and the broker) and a
    number counted over the whole broker, so that a topic unloaded and loaded again never
    hands out the name of one of its producers coming back (a count per loaded topic would
    start again, and the new producer would be refused as ProducerBusy)."""
    return f"{prefix}-{next(_GENERATED)}"


class ProducerFencedError(BrokerServiceError):
    """A producer refused because an ExclusiveWithFencing producer fenced its name."""

    code = ServerError.ProducerFenced


@dataclass
class Waiter:
    """A WaitForExclusive producer not admitted yet, and how to tell it that it is ready."""

    producer: Producer
    on_ready: Callable[[Producer, int], None]


class ProducerRegistry:
    """The producers of one topic and the access-mode rules between them."""

    def __init__(self) -> None:
        self.producers: dict[int, Producer] = {}
        self.exclusive: Producer | None = None
        self.epoch = 0
        self.waiting: deque[Waiter] = deque()
        self._fenced_names: set[str] = set()
        self._fencing = False

    def admit(self, producer: Producer) -> bool:
        """Admit ``producer`` or raise; False means it waits (WaitForExclusive)."""
        mode = producer.access_mode
        for other in self.producers.values():
            if other.name == producer.name:
                raise ProducerBusyError(
                    f"Producer with name '{producer.name}' is already connected to topic"
                )
        if producer.name in self._fenced_names and mode != ProducerAccessMode.ExclusiveWithFencing:
            raise ProducerFencedError(
                f"Producer {producer.name} was fenced by an ExclusiveWithFencing producer"
            )
        if mode == ProducerAccessMode.ExclusiveWithFencing:
            self._fencing = True
            try:
                for other in list(self.producers.values()):
                    self._fenced_names.add(other.name)
                    other.disconnect()
            finally:
                self._fencing = False
            self._fenced_names.discard(producer.name)
            self._add_exclusive(producer)
            return True
        # As Pulsar answers: an Exclusive producer that cannot have the topic is fenced, a
        # Shared one is busy.
        holder = self.exclusive.name if self.exclusive is not None else None
        if holder is None and self.waiting:
            holder = self.waiting[0].producer.name
        if mode == ProducerAccessMode.WaitForExclusive:
            if self.exclusive is not None or self.producers:
                return False
        elif holder is not None:
            error = (
                ProducerFencedError if mode == ProducerAccessMode.Exclusive else ProducerBusyError
            )
            raise error(f"Topic has an existing exclusive producer: {holder}")
        elif mode == ProducerAccessMode.Exclusive and self.producers:
            raise ProducerFencedError("Topic has existing shared producers")
        if mode in (ProducerAccessMode.Exclusive, ProducerAccessMode.WaitForExclusive):
            self._add_exclusive(producer)
            return True
        self._add(producer)
        return True

    def wait(self, producer: Producer, on_ready: Callable[[Producer, int], None]) -> None:
        """Queue a WaitForExclusive producer; ``on_ready`` runs when it gets the topic."""
        self.waiting.append(Waiter(producer, on_ready))

    def _add_exclusive(self, producer: Producer) -> None:
        self.epoch += 1
        self.exclusive = producer
        self._add(producer)

    def _add(self, producer: Producer) -> None:
        self.producers[id(producer)] = producer
        producer.attached = True

    def remove(self, producer: Producer) -> None:
        """Forget ``producer`` and promote the next waiting one if the topic is now free."""
        if self.producers.pop(id(producer), None) is not None:
            producer.attached = False
        if self.exclusive is producer:
            self.exclusive = None
        for waiter in list(self.waiting):
            if waiter.producer is producer:
                self.waiting.remove(waiter)
        self._promote()

    def _promote(self) -> None:
        while self.waiting and not self.producers and not self._fencing:
            waiter = self.waiting.popleft()
            if waiter.producer.closed:
                continue
            self._add_exclusive(waiter.producer)
            waiter.on_ready(waiter.producer, self.epoch)
