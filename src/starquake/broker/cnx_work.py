"""The work a connection runs off the hot path before answering a request: loading a topic,
storing the cursors. Failures become :class:`BrokerServiceError` (the request's answer)."""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import TYPE_CHECKING, Protocol

from starquake.broker.errors import BrokerServiceError, PersistenceError

if TYPE_CHECKING:
    from starquake.broker.topic_api import TopicApi
    from starquake.common.topic_name import TopicName

log = logging.getLogger("starquake.broker.connection")


class TopicsAndCursors(Protocol):
    """What this work needs of the broker service."""

    async def get_topic(
        self, topic: TopicName, *, create: bool = True, explicit: bool = False
    ) -> TopicApi:
        """The loaded topic, loading or (if allowed) creating it."""
        ...

    async def persist_cursors(self) -> None:
        """Store every durable cursor change made so far; raises if the store fails."""
        ...


async def load_topic(service: TopicsAndCursors, topic_name: TopicName, create: bool) -> TopicApi:
    """The topic, loaded (and created when ``create``); an unexpected failure is logged."""
    try:
        return await service.get_topic(topic_name, create=create)
    except BrokerServiceError:
        raise
    except Exception as exc:
        log.exception("loading topic %s failed", topic_name)
        raise BrokerServiceError(f"Cannot load topic {topic_name}: {exc!r}") from exc


async def persist_cursors(
    service: TopicsAndCursors,
    always: Callable[[], None] | None,
    undo: Callable[[], None] | None,
) -> None:
    """Store the durable cursor changes made so far; ``undo`` runs at once when that fails,
    ``always`` in any case."""
    try:
        await service.persist_cursors()
    except Exception as exc:
        if undo is not None:
            undo()
        raise PersistenceError(f"Cannot store the subscription: {exc}") from exc
    finally:
        if always is not None:
            always()
