"""The handshake of a broker connection: CONNECT, and the refresh of expiring credentials.

State machine of one connection (with ``authenticationEnabled``)::

    start --CONNECT--> authenticating --ok--> connected (role set) --exp passed--> challenged
                           |                     ^                                  |
                           +--refused--> ERROR(AuthenticationError), closed         |
                                                 +----AUTH_RESPONSE, same role------+

- CONNECT's ``auth_method_name`` (or the legacy ``auth_method`` enum) and ``auth_data`` are
  checked off the connection's read path (a password check may take a while); any other
  command that arrives before CONNECTED closes the connection, as does a second CONNECT.
- A refusal is answered at once with ``ERROR(request_id -1, AuthenticationError, "Failed to
  authenticate: <reason>")``; the connection then stops reading and closes a moment later (see
  ``AuthenticationService.close_refused``), which slows down whoever reconnects in a loop.
- Every ``authenticationRefreshCheckSeconds`` a connection whose credentials expired (a token's
  ``exp``) is sent ``AUTH_CHALLENGE(AuthData{method, "refresh"})`` if the client announced
  ``supports_auth_refresh``, and closed otherwise. The client must answer with AUTH_RESPONSE
  carrying valid credentials of the same role before the next check, or it is closed.

Without ``authenticationEnabled`` CONNECT is answered at once and no role is set.
"""

from __future__ import annotations

import logging
from collections.abc import Coroutine
from typing import TYPE_CHECKING, Any, Protocol

from starquake import __version__
from starquake.broker.security.provider import AuthenticationError, AuthResult, Credentials
from starquake.protocol import commands
from starquake.protocol.errors import ServerError
from starquake.protocol.framing import encode_command
from starquake.protocol.wire import pb

if TYPE_CHECKING:
    from starquake.broker.security.authentication import AuthenticationService
    from starquake.broker.service import BrokerService

log = logging.getLogger("starquake.broker.connection")

T = pb.BaseCommand
SERVER_VERSION = f"Pulsar Server starquake-{__version__}"
NO_REQUEST_ID = 2**64 - 1
"""The request id of an ERROR that answers no request (Java's -1)."""
REFUSED = "refused credentials"
"""The reason a refused connection stops reading while it lingers."""
REFRESH_AUTH_DATA = b"refresh"
"""What an AUTH_CHALLENGE that asks for fresh credentials carries."""
_LEGACY_METHODS = {
    pb.AuthMethodNone: "none",
    pb.AuthMethodYcaV1: "ycav1",
    pb.AuthMethodAthens: "athens",
}


class HandshakeContext(Protocol):
    """What the authenticator of a connection needs from it."""

    service: BrokerService
    remote_address: str

    @property
    def is_open(self) -> bool:
        """The connection is up (replies can still be written)."""
        ...

    def write(self, frame: bytes) -> None:
        """Queue one frame."""
        ...

    def close(self) -> None:
        """Close the connection (after flushing what is queued)."""
        ...

    def hold_reading(self, reason: str) -> None:
        """Stop reading from the peer."""
        ...

    def peer_common_name(self) -> str | None:
        """The common name of the TLS client certificate, or None without one."""
        ...

    def spawn(self, coro: Coroutine[Any, Any, None]) -> None:
        """Run ``coro`` as a background task of the broker service."""
        ...


class ConnectionAuthenticator:
    """The handshake of one connection: CONNECT, AUTH_RESPONSE and the credentials' expiry."""

    def __init__(self, cnx: HandshakeContext) -> None:
        self._cnx = cnx
        self.connected = False
        """CONNECTED was sent: the connection may carry other commands."""
        self.protocol_version = 0
        """The protocol version agreed on (the client's, capped at ours)."""
        self.client_version = ""
        self.role: str | None = None
        """The authenticated role (None while authentication is off or not yet done)."""
        self.method = ""
        """The authentication method the client used (``token``, ``basic``, ``tls``...)."""
        self.expires_at: float | None = None
        """When the credentials expire (seconds since the epoch; None: never)."""
        self._authenticating = False
        self._supports_auth_refresh = False
        self._auth_challenge_pending = False

    def on_connect(self, command: T, _: bytes | None) -> None:
        """Answer CONNECT: at once without authentication, else once the credentials pass."""
        cnx = self._cnx
        if self.connected or self._authenticating:
            log.warning("closing connection from %s: second CONNECT", cnx.remote_address)
            cnx.close()
            return
        connect = command.connect
        self.protocol_version = min(connect.protocol_version, commands.MAX_PROTOCOL_VERSION)
        self.client_version = connect.client_version
        authentication = cnx.service.authentication
        if authentication is None:
            self._complete_connect()
            return
        self._supports_auth_refresh = connect.feature_flags.supports_auth_refresh
        if connect.HasField("auth_method_name"):
            method = connect.auth_method_name
        elif connect.HasField("auth_method"):
            method = _LEGACY_METHODS.get(connect.auth_method, "none")
        else:
            method = "none"
        self._authenticating = True
        cnx.spawn(
            self._authenticate(authentication, method, self._credentials(method, connect.auth_data))
        )

    def _credentials(self, method: str, data: bytes) -> Credentials:
        common_name = self._cnx.peer_common_name() if method == "tls" else None
        host = self._cnx.remote_address.rsplit(":", 1)[0]  # "host:port", IPv6 hosts too
        return Credentials(data, common_name, host)

    async def _authenticate(
        self, authentication: AuthenticationService, method: str, credentials: Credentials
    ) -> None:
        result = await self._check(authentication, method, credentials)
        self._authenticating = False
        if result is None:
            self._cnx.service.connection_counts.failed += 1
        if result is None or not self._cnx.is_open:
            return
        authentication.successes += 1
        self.role = result.role
        self.method = result.method
        self.expires_at = result.expires_at
        log.debug(
            "%s connected with role %s using auth method %s",
            self._cnx.remote_address,
            result.role,
            result.method,
        )
        self._complete_connect()

    async def _check(
        self, authentication: AuthenticationService, method: str, credentials: Credentials
    ) -> AuthResult | None:
        """The result of authenticating, or None once the refusal has been answered."""
        try:
            return await authentication.authenticate(method, credentials)
        except AuthenticationError as exc:
            reason = str(exc)
        except Exception as exc:  # never leave the client waiting
            log.exception("authenticating %s failed", self._cnx.remote_address)
            reason = f"internal error ({type(exc).__name__})"
        self._refuse(authentication, method, reason)
        return None

    def _refuse(self, authentication: AuthenticationService, method: str, reason: str) -> None:
        """Count, log and answer the refusal, stop reading, and close: a connection that never
        got in after the service's linger, one that did (a failed refresh) at once."""
        cnx = self._cnx
        authentication.refused(cnx.remote_address, method, reason)
        cnx.write(
            commands.error(
                NO_REQUEST_ID, ServerError.AuthenticationError, f"Failed to authenticate: {reason}"
            )
        )
        cnx.hold_reading(REFUSED)
        if self.connected:
            cnx.close()
        else:
            authentication.close_refused(cnx.close)

    def _complete_connect(self) -> None:
        self.connected = True
        self._cnx.service.connection_counts.succeeded += 1
        self._cnx.write(
            commands.connected(
                SERVER_VERSION, self.protocol_version, self._cnx.service.config.maxMessageSize
            )
        )

    # --- refresh --------------------------------------------------------------------------------

    def check_credentials_expiry(self, now: float) -> None:
        """Challenge (or close) the connection if its credentials expired by ``now``."""
        cnx = self._cnx
        expires_at = self.expires_at
        if not self.connected or not cnx.is_open or expires_at is None or expires_at > now:
            return
        if not self._supports_auth_refresh:
            log.info(
                "closing connection from %s (role %s): its credentials expired and the client "
                "cannot refresh them",
                cnx.remote_address,
                self.role,
            )
            cnx.close()
            return
        if self._auth_challenge_pending:
            log.info(
                "closing connection from %s (role %s): no fresh credentials after the challenge",
                cnx.remote_address,
                self.role,
            )
            cnx.close()
            return
        self._auth_challenge_pending = True
        cnx.write(_auth_challenge(self.method, self.protocol_version))

    def on_auth_response(self, command: T, _: bytes | None) -> None:
        """Check the fresh credentials an AUTH_RESPONSE carries (same method, same role)."""
        cnx = self._cnx
        authentication = cnx.service.authentication
        if authentication is None:
            log.warning("closing connection from %s: unexpected AUTH_RESPONSE", cnx.remote_address)
            cnx.close()
            return
        response = command.auth_response.response
        method = response.auth_method_name or self.method
        if method != self.method:
            reason = f"the auth method cannot change from {self.method!r} to {method!r}"
            self._refuse(authentication, method, reason)
            return
        credentials = self._credentials(method, response.auth_data)
        cnx.spawn(self._reauthenticate(authentication, method, credentials))

    async def _reauthenticate(
        self, authentication: AuthenticationService, method: str, credentials: Credentials
    ) -> None:
        result = await self._check(authentication, method, credentials)
        if result is None or not self._cnx.is_open:
            return
        if result.role != self.role:
            log.warning(
                "closing connection from %s: the role cannot change on a refresh (was %s, got %s)",
                self._cnx.remote_address,
                self.role,
                result.role,
            )
            self._cnx.close()
            return
        authentication.successes += 1
        self.expires_at = result.expires_at
        self._auth_challenge_pending = False
        log.info("refreshed the credentials of %s (role %s)", self._cnx.remote_address, result.role)


def _auth_challenge(method: str, protocol_version: int) -> bytes:
    cmd = T(type=T.AUTH_CHALLENGE)
    challenge = cmd.auth_challenge
    challenge.server_version = SERVER_VERSION
    challenge.challenge.auth_method_name = method
    challenge.challenge.auth_data = REFRESH_AUTH_DATA
    challenge.protocol_version = protocol_version
    return encode_command(cmd)
