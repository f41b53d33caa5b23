"""What every authentication provider shares: the credentials it is given, the result it
returns, the error it raises, and a small bounded cache of recent verdicts."""

from __future__ import annotations

from collections import OrderedDict
from dataclasses import dataclass
from typing import ClassVar, Generic, Protocol, TypeVar

from starquake.broker.errors import BrokerServiceError
from starquake.protocol.errors import ServerError

_K = TypeVar("_K")
_V = TypeVar("_V")


class AuthenticationError(BrokerServiceError):
    """Credentials refused; the message says why without repeating any secret."""

    code = ServerError.AuthenticationError


@dataclass(frozen=True, slots=True)
class Credentials:
    """What a client presented.

    ``data`` is the method's credential bytes: the ``auth_data`` of CONNECT or AUTH_RESPONSE,
    or what follows the scheme of an HTTP ``Authorization`` header (for basic, decoded from
    base64). ``tls_common_name`` is the common name of a client certificate that the TLS
    handshake verified (None on plaintext or without one).
    """

    data: bytes = b""
    tls_common_name: str | None = None
    source: str = ""
    """The client's address (without port), for limits per address."""


@dataclass(frozen=True, slots=True)
class AuthResult:
    """An authenticated client: its role, the method, and when the credentials expire
    (seconds since the epoch; None: never)."""

    role: str
    method: str
    expires_at: float | None = None


class AuthenticationProvider(Protocol):
    """Turns credentials of one method (``token``, ``basic``, ``tls``) into a role."""

    method: ClassVar[str]

    async def authenticate(self, credentials: Credentials) -> AuthResult:
        """The role of ``credentials``; raises :class:`AuthenticationError` if refused."""
        ...

    def close(self) -> None:
        """Release threads or other resources (the broker is stopping)."""
        ...


class BoundedCache(Generic[_K, _V]):
    """A mapping that forgets its least recently used entries past ``capacity``."""

    def __init__(self, capacity: int) -> None:
        self.capacity = capacity
        self._items: OrderedDict[_K, _V] = OrderedDict()

    def get(self, key: _K) -> _V | None:
        """The value of ``key`` (now the most recently used), or None."""
        value = self._items.get(key)
        if value is not None:
            self._items.move_to_end(key)
        return value

    def put(self, key: _K, value: _V) -> None:
        """Store a value, evicting the least recently used beyond the capacity."""
        self._items[key] = value
        self._items.move_to_end(key)
        while len(self._items) > self.capacity:
            self._items.popitem(last=False)

    def __len__(self) -> int:
        return len(self._items)
