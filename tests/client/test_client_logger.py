"""``Client(logger=...)``: the client's log records go to the Python logger, console logger or
file logger given, as with the official client; without one they stay with ``starquake.client``.
"""

from __future__ import annotations

import asyncio
import io
import logging
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

import starquake.client
import starquake.client.asyncio
from starquake.broker.embedded import EmbeddedBroker
from starquake.client import ConsoleLogger, FileLogger, LoggerLevel


class Collect(logging.Handler):
    """Keeps the messages of the records it handles."""

    def __init__(self) -> None:
        super().__init__()
        self.messages: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.messages.append(record.getMessage())


def _topic() -> str:
    return f"persistent://public/default/logger-{uuid.uuid4().hex[:12]}"


@pytest.fixture
def app_logger() -> Iterator[tuple[logging.Logger, Collect]]:
    logger = logging.getLogger(f"app-{uuid.uuid4().hex[:8]}")
    logger.setLevel(logging.INFO)
    logger.propagate = False
    collect = Collect()
    logger.addHandler(collect)
    yield logger, collect
    logger.removeHandler(collect)


def test_a_python_logger_receives_the_lifecycle_records(
    broker: EmbeddedBroker, app_logger: tuple[logging.Logger, Collect]
) -> None:
    logger, collect = app_logger
    client = starquake.client.Client(broker.service_url, logger=logger)
    try:
        producer = client.create_producer(_topic())
        producer.close()
    finally:
        client.close()
    assert any("registered on the broker" in m for m in collect.messages), collect.messages
    assert any(m.endswith("closed") and "Producer(" in m for m in collect.messages)


def test_the_asyncio_client_routes_records_to_its_logger(
    broker: EmbeddedBroker, app_logger: tuple[logging.Logger, Collect]
) -> None:
    logger, collect = app_logger

    async def scenario() -> None:
        client = starquake.client.asyncio.Client(broker.service_url, logger=logger)
        try:
            consumer = await client.subscribe(_topic(), "sub")
            await consumer.close()
        finally:
            await client.close()

    asyncio.run(scenario())
    assert any("subscribed" in m for m in collect.messages), collect.messages
    assert any("Consumer(" in m and m.endswith("closed") for m in collect.messages)


def test_records_below_the_loggers_level_are_not_forwarded(
    broker: EmbeddedBroker, app_logger: tuple[logging.Logger, Collect]
) -> None:
    logger, collect = app_logger
    logger.setLevel(logging.WARNING)
    client = starquake.client.Client(broker.service_url, logger=logger)
    try:
        client.create_producer(_topic()).close()
    finally:
        client.close()
    assert collect.messages == []


def test_a_file_logger_writes_into_its_file(broker: EmbeddedBroker, tmp_path: Path) -> None:
    path = tmp_path / "client.log"
    client = starquake.client.Client(
        broker.service_url, logger=FileLogger(LoggerLevel.Info, str(path))
    )
    try:
        client.create_producer(_topic()).close()
    finally:
        client.close()
    text = path.read_text(encoding="utf-8")
    assert "registered on the broker" in text
    assert "INFO" in text


def test_a_console_logger_writes_to_standard_error(
    broker: EmbeddedBroker, monkeypatch: pytest.MonkeyPatch
) -> None:
    err = io.StringIO()
    monkeypatch.setattr("sys.stderr", err)
    client = starquake.client.Client(broker.service_url, logger=ConsoleLogger(LoggerLevel.Info))
    try:
        client.create_producer(_topic()).close()
    finally:
        client.close()
    assert "registered on the broker" in err.getvalue()


def test_the_loggers_are_detached_when_the_client_closes(
    broker: EmbeddedBroker, app_logger: tuple[logging.Logger, Collect]
) -> None:
    logger, collect = app_logger
    client_logger = logging.getLogger("starquake.client")
    handlers, level = list(client_logger.handlers), client_logger.level
    client = starquake.client.Client(broker.service_url, logger=logger)
    client.close()
    assert client_logger.handlers == handlers
    assert client_logger.level == level
    other = starquake.client.Client(broker.service_url)
    try:
        other.create_producer(_topic()).close()
    finally:
        other.close()
    assert not any("registered on the broker" in m for m in collect.messages)


def test_records_below_the_former_level_do_not_reach_the_root_handlers(
    broker: EmbeddedBroker, app_logger: tuple[logging.Logger, Collect]
) -> None:
    logger, collect = app_logger
    root = logging.getLogger()
    seen = Collect()
    root.addHandler(seen)
    try:
        client = starquake.client.Client(broker.service_url, logger=logger)
        try:
            client.create_producer(_topic()).close()
        finally:
            client.close()
    finally:
        root.removeHandler(seen)
    assert any("registered on the broker" in m for m in collect.messages)
    if logging.getLogger("starquake.client").getEffectiveLevel() > logging.INFO:
        assert not any("registered on the broker" in m for m in seen.messages)


def test_anything_else_is_refused() -> None:
    with pytest.raises(ValueError, match="logger"):
        starquake.client.asyncio.Client("pulsar://localhost:6650", logger="verbose")


def test_every_client_module_logs_through_the_routed_logger() -> None:
    # the routing filter sits on the client logger itself, and a logger's filters do not see
    # the records of its children: a module logging under another name would escape it
    source = Path(starquake.client.__file__).parent
    strays = [
        f"{path.relative_to(source)}:{number}"
        for path in sorted(source.rglob("*.py"))
        for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1)
        if "getLogger(" in line
        and "getLogger(CLIENT_LOGGER_NAME)" not in line
        and path.name != "_logging.py"
    ]
    assert strays == []
