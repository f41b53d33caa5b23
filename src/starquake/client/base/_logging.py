"""Where the client's log records go: the ``logger`` argument of ``Client``.

The client logs through the Python logger ``starquake.client``. A ``Client(logger=...)``
(a ``logging.Logger``, a :class:`ConsoleLogger` or a :class:`FileLogger`) adds a handler
there while the client is open, and lowers that logger's level to the one asked for; records
below the level ``starquake.client`` had go to these handlers only, not to the handlers
above it (the root's). The routing is process-wide: every open client's records reach every
logger given to a client of the process.
"""

from __future__ import annotations

import logging
from typing import Any

from starquake.client.base._arg_checks import check_enum, check_type
from starquake.client.base._enums import LoggerLevel

CLIENT_LOGGER_NAME = "starquake.client"
_FORMAT = "%(asctime)s %(levelname)s %(name)s: %(message)s"
_LEVELS = {
    LoggerLevel.Debug: logging.DEBUG,
    LoggerLevel.Info: logging.INFO,
    LoggerLevel.Warn: logging.WARNING,
    LoggerLevel.Error: logging.ERROR,
}


class ConsoleLogger:
    """Log to the console (standard error) at ``log_level``."""

    def __init__(self, log_level: LoggerLevel = LoggerLevel.Info) -> None:
        check_enum(LoggerLevel, log_level, "log_level")
        self.log_level = log_level


class FileLogger:
    """Log to ``log_file`` (appended to) at ``log_level``."""

    def __init__(self, log_level: LoggerLevel, log_file: str) -> None:
        check_enum(LoggerLevel, log_level, "log_level")
        check_type(str, log_file, "log_file")
        self.log_level = log_level
        self.log_file = log_file


class _ToLogger(logging.Handler):
    """Hands records to another logger (its level, filters and handlers apply)."""

    def __init__(self, target: logging.Logger) -> None:
        super().__init__(target.getEffectiveLevel())
        self.target = target

    def emit(self, record: logging.LogRecord) -> None:
        if self.target.isEnabledFor(record.levelno):
            self.target.handle(record)


class _Routing(logging.Filter):
    """Filter of the ``starquake.client`` logger while clients have loggers: records below
    its former level go to the clients' handlers only."""

    def __init__(self, logger: logging.Logger) -> None:
        super().__init__()
        self.logger = logger
        self.handlers: list[logging.Handler] = []
        self.saved_level = logger.level
        self.threshold = logger.getEffectiveLevel()

    def filter(self, record: logging.LogRecord) -> bool:
        if record.levelno >= self.threshold:
            return True
        for handler in list(self.handlers):
            if record.levelno >= handler.level:
                handler.handle(record)
        return False

    def add(self, handler: logging.Handler) -> None:
        self.handlers.append(handler)
        self.logger.addHandler(handler)
        lowest = min(h.level for h in self.handlers)
        if lowest < self.logger.getEffectiveLevel():
            self.logger.setLevel(lowest)

    def remove(self, handler: logging.Handler) -> bool:
        """Remove ``handler``; True when no client handler is left (levels restored)."""
        if handler in self.handlers:
            self.handlers.remove(handler)
        self.logger.removeHandler(handler)
        if self.handlers:
            return False
        self.logger.setLevel(self.saved_level)
        return True


_routing: _Routing | None = None


def _handler_for(logger: Any) -> logging.Handler:
    if isinstance(logger, logging.Logger):
        return _ToLogger(logger)
    handler: logging.Handler
    if isinstance(logger, ConsoleLogger):
        handler = logging.StreamHandler()
    elif isinstance(logger, FileLogger):
        handler = logging.FileHandler(logger.log_file, encoding="utf-8")
    else:
        raise ValueError(
            "Argument logger is expected to be a logging.Logger, ConsoleLogger or FileLogger, "
            f"not '{type(logger).__name__}'"
        )
    handler.setLevel(_LEVELS[LoggerLevel(int(logger.log_level))])
    handler.setFormatter(logging.Formatter(_FORMAT))
    return handler


def attach_logger(logger: Any) -> logging.Handler | None:
    """Send the client's records to ``logger`` (None: leave them to ``starquake.client``);
    the handler to give :func:`detach_logger` when the client closes."""
    global _routing
    if logger is None:
        return None
    handler = _handler_for(logger)
    client_logger = logging.getLogger(CLIENT_LOGGER_NAME)
    if _routing is None:
        _routing = _Routing(client_logger)
        client_logger.addFilter(_routing)
    _routing.add(handler)
    return handler


def detach_logger(handler: logging.Handler | None) -> None:
    """Undo :func:`attach_logger` (nothing for None or a handler detached already)."""
    global _routing
    if handler is None or _routing is None:
        return
    if _routing.remove(handler):
        _routing.logger.removeFilter(_routing)
        _routing = None
    handler.close()
