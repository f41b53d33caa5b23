"""At most one log line per interval for events that a hostile peer can repeat at will."""

from __future__ import annotations

import logging
import time


class LogThrottle:
    """Logs an event at most once per ``interval`` seconds; the lines in between are counted
    and the count is added to the next line that is logged."""

    def __init__(self, logger: logging.Logger, interval: float = 10.0) -> None:
        self._log = logger
        self.interval = interval
        self._last = float("-inf")
        self._suppressed = 0

    def log(self, level: int, message: str, *args: object) -> bool:
        """Log ``message % args`` at ``level`` unless a line went out less than an interval
        ago (then only count it); returns whether it was logged."""
        now = time.monotonic()
        if now - self._last < self.interval:
            self._suppressed += 1
            return False
        suppressed, self._suppressed = self._suppressed, 0
        self._last = now
        if suppressed:
            message += " (and %d more like it since the last such line)"
            args = (*args, suppressed)
        self._log.log(level, message, *args)
        return True
