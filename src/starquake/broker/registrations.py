"""The PRODUCER or SUBSCRIBE requests under way on one connection, by producer or consumer id.

Creating a producer or a consumer may wait (the topic loads, a schema is checked, a new
subscription is stored). A client that stops waiting (its operation timed out, or the
producer or consumer was closed meanwhile) sends CLOSE_PRODUCER / CLOSE_CONSUMER for an id the
connection does not hold yet. As Pulsar's broker does, that close gives the creation under way
up: the close is confirmed at once, and what the request would have created is not kept (an
exclusive subscription, or a producer's name, would otherwise stay taken for as long as the
connection lives). A second request for an id whose creation is still under way is refused
with ServiceNotReady (the client tries again later), so one id has at most one creation under
way.
"""

from __future__ import annotations

from google.protobuf.message import Message

from starquake.protocol.wire import pb


class Registrations:
    """Creations under way: id -> the request id of the request creating it."""

    __slots__ = ("_under_way",)

    def __init__(self) -> None:
        self._under_way: dict[int, int] = {}

    def begin(self, handler_id: int, request_id: int) -> bool:
        """Record a creation; False if one is already under way for ``handler_id``."""
        if handler_id in self._under_way:
            return False
        self._under_way[handler_id] = request_id
        return True

    def wanted(self, handler_id: int, request_id: int) -> bool:
        """The creation of ``request_id`` is still under way (it was not given up)."""
        return self._under_way.get(handler_id) == request_id

    def end(self, handler_id: int, request_id: int) -> None:
        """The creation of ``request_id`` is over (done or failed)."""
        if self._under_way.get(handler_id) == request_id:
            del self._under_way[handler_id]

    def give_up(self, handler_id: int) -> bool:
        """A close arrived for ``handler_id``: give its creation up; False if none was under
        way."""
        return self._under_way.pop(handler_id, None) is not None

    def __len__(self) -> int:
        return len(self._under_way)


class CreationsUnderWay:
    """The PRODUCER and the SUBSCRIBE requests under way on one connection."""

    __slots__ = ("consumers", "producers")

    def __init__(self) -> None:
        self.producers = Registrations()
        self.consumers = Registrations()

    def failed(self, request: Message) -> None:
        """``request`` was answered with an error: a PRODUCER or SUBSCRIBE is over."""
        if isinstance(request, pb.CommandSubscribe):
            self.consumers.end(request.consumer_id, request.request_id)
        elif isinstance(request, pb.CommandProducer):
            self.producers.end(request.producer_id, request.request_id)
