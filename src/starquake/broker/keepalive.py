"""Keep-alive checks of one client connection, every ``keepAliveIntervalSeconds``.

A connection still without CONNECTED at its first check is closed (as Pulsar does). One that
has been silent for an interval gets a PING; if it is still silent (no PONG, nothing at all)
at the next check, it is cut off: a dead peer must not keep its consumers and their
unacknowledged messages alive.
"""

from __future__ import annotations

import asyncio
import logging
import time
from typing import Protocol

from starquake.protocol import commands
from starquake.protocol.wire import pb

log = logging.getLogger("starquake.broker.connection")


class KeptAlive(Protocol):
    """What the checks need from their connection."""

    remote_address: str
    closing: bool
    """The connection is closing (or closed by this side)."""
    last_received: float
    """When the peer last sent something (monotonic seconds)."""

    @property
    def is_open(self) -> bool:
        """The connection is up."""
        ...

    @property
    def connected(self) -> bool:
        """CONNECTED was sent."""
        ...

    def write(self, frame: bytes) -> None:
        """Queue one frame."""
        ...

    def abort(self) -> None:
        """Drop the connection now."""
        ...

    def log_close(self, why: str) -> None:
        """Log why the connection closes."""
        ...


class KeepAlive:
    """The keep-alive timer of one connection and its PING under way."""

    __slots__ = ("_cnx", "_interval", "_ping_outstanding", "_timer")

    def __init__(self, cnx: KeptAlive, interval: float) -> None:
        self._cnx = cnx
        self._interval = interval
        self._timer: asyncio.TimerHandle | None = None
        self._ping_outstanding = False

    def start(self) -> None:
        """Start the checks (none when the interval is 0)."""
        if self._interval > 0:
            self._timer = asyncio.get_running_loop().call_later(self._interval, self._check)

    def stop(self) -> None:
        """Stop the checks (the connection is gone)."""
        if self._timer is not None:
            self._timer.cancel()

    def on_ping(self, command: pb.BaseCommand, _: bytes | None) -> None:
        """PING: answer PONG."""
        self._cnx.write(commands.pong())

    def on_pong(self, command: pb.BaseCommand, _: bytes | None) -> None:
        """PONG: the peer is alive."""
        self._ping_outstanding = False

    def _check(self) -> None:
        cnx = self._cnx
        if not cnx.is_open or cnx.closing:
            return
        if not cnx.connected:
            cnx.log_close(f"no CONNECT completed within {self._interval} s")
            cnx.abort()
            return
        if time.monotonic() - cnx.last_received >= self._interval:
            if self._ping_outstanding:
                log.info("closing idle connection from %s (no PONG)", cnx.remote_address)
                cnx.abort()
                return
            self._ping_outstanding = True
            cnx.write(commands.ping())
        self._timer = asyncio.get_running_loop().call_later(self._interval, self._check)
