"""The handshake of a broker connection: CONNECT, and the refresh of expiring credentials.

State machine of one connection (with ``authenticationEnabled``)::

    start --CONNECT--> authenticating --ok--> connected (role set) --exp passed--> challenged
                           |                     ^                                  |
                           +--refused--> ERROR(AuthenticationError), closed         |
                                                 +----AUTH_RESPONSE, same role------+

- CONNECT's ``auth_method_name`` (or the legacy ``auth_method`` enum) and ``auth_data`` are
  checked off the connection's read path (a password check may take a while); any other
  command that arrives before CONNECTED closes the connection, as does a second CONNECT.
- A refusal is answered with ``ERROR(request_id -1, AuthenticationError, "Failed to
  authenticate: <reason>")`` and the connection closes, after a short delay (see
  ``AuthenticationService.answer_refusal``) that slows down whoever tries credentials in a
  loop.
- Every ``authenticationRefreshCheckSeconds`` a connection whose credentials expired (a token's
  ``exp``) is sent ``AUTH_CHALLENGE(AuthData{method, "refresh"})`` if the client announced
  ``supports_auth_refresh``, and closed otherwise. The client must answer with AUTH_RESPONSE
  carrying valid credentials of the same role before the next check, or it is closed.

Without ``authenticationEnabled`` CONNECT is answered at once and no role is set.
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING

from starquake import __version__
from starquake.broker.cnx_base import CnxBase
from starquake.broker.security.provider import AuthenticationError, AuthResult, Credentials
from starquake.protocol import commands
from starquake.protocol.errors import ServerError
from starquake.protocol.framing import encode_command
from starquake.protocol.wire import pb

if TYPE_CHECKING:
    from starquake.broker.security.authentication import AuthenticationService

log = logging.getLogger("starquake.broker.connection")

T = pb.BaseCommand
SERVER_VERSION = f"Pulsar Server starquake-{__version__}"
NO_REQUEST_ID = 2**64 - 1
"""The request id of an ERROR that answers no request (Java's -1)."""
REFRESH_AUTH_DATA = b"refresh"
"""What an AUTH_CHALLENGE that asks for fresh credentials carries."""
_LEGACY_METHODS = {
    pb.AuthMethodNone: "none",
    pb.AuthMethodYcaV1: "ycav1",
    pb.AuthMethodAthens: "athens",
}


class ConnectionAuthentication(CnxBase):
    """CONNECT and AUTH_RESPONSE handling of :class:`~starquake.broker.connection.ServerCnx`."""

    connected: bool
    protocol_version: int
    client_version: str
    auth_role: str | None
    auth_method: str
    auth_expires_at: float | None = None
    """When the connection's credentials expire (seconds since the epoch; None: never)."""
    _authenticating = False
    _supports_auth_refresh = False
    _auth_challenge_pending = False

    def close(self) -> None:
        """Close the connection (ServerCnx implements it)."""
        raise NotImplementedError

    def _on_connect(self, command: T, _: bytes | None) -> None:
        if self.connected or self._authenticating:
            log.warning("closing connection from %s: second CONNECT", self.remote_address)
            self.close()
            return
        connect = command.connect
        self.protocol_version = min(connect.protocol_version, commands.MAX_PROTOCOL_VERSION)
        self.client_version = connect.client_version
        authentication = self.service.authentication
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
        self.spawn(
            self._authenticate(authentication, method, self._credentials(method, connect.auth_data))
        )

    def _credentials(self, method: str, data: bytes) -> Credentials:
        common_name = self.peer_common_name() if method == "tls" else None
        return Credentials(data, common_name)

    async def _authenticate(
        self, authentication: AuthenticationService, method: str, credentials: Credentials
    ) -> None:
        result = await self._check(authentication, method, credentials)
        self._authenticating = False
        if result is None or not self.is_open:
            return
        authentication.successes += 1
        self.auth_role = result.role
        self.auth_method = result.method
        self.auth_expires_at = result.expires_at
        log.debug(
            "%s connected with role %s using auth method %s",
            self.remote_address,
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
            log.exception("authenticating %s failed", self.remote_address)
            reason = f"internal error ({type(exc).__name__})"
        self._refuse(authentication, method, reason)
        return None

    def _refuse(self, authentication: AuthenticationService, method: str, reason: str) -> None:
        """Count and log the refusal, then (after the service's delay) answer it and close."""
        authentication.refused(self.remote_address, method, reason)
        error = commands.error(
            NO_REQUEST_ID, ServerError.AuthenticationError, f"Failed to authenticate: {reason}"
        )

        def answer() -> None:
            self.write(error)
            self.close()

        authentication.answer_refusal(answer)

    def _complete_connect(self) -> None:
        self.connected = True
        self.write(
            commands.connected(
                SERVER_VERSION, self.protocol_version, self.service.config.maxMessageSize
            )
        )

    # --- refresh --------------------------------------------------------------------------------

    def check_credentials_expiry(self, now: float) -> None:
        """Challenge (or close) the connection if its credentials expired by ``now``."""
        expires_at = self.auth_expires_at
        if not self.connected or not self.is_open or expires_at is None or expires_at > now:
            return
        if not self._supports_auth_refresh:
            log.info(
                "closing connection from %s (role %s): its credentials expired and the client "
                "cannot refresh them",
                self.remote_address,
                self.auth_role,
            )
            self.close()
            return
        if self._auth_challenge_pending:
            log.info(
                "closing connection from %s (role %s): no fresh credentials after the challenge",
                self.remote_address,
                self.auth_role,
            )
            self.close()
            return
        self._auth_challenge_pending = True
        self.write(_auth_challenge(self.auth_method, self.protocol_version))

    def _on_auth_response(self, command: T, _: bytes | None) -> None:
        authentication = self.service.authentication
        if authentication is None:
            log.warning("closing connection from %s: unexpected AUTH_RESPONSE", self.remote_address)
            self.close()
            return
        response = command.auth_response.response
        method = response.auth_method_name or self.auth_method
        if method != self.auth_method:
            reason = f"the auth method cannot change from {self.auth_method!r} to {method!r}"
            self._refuse(authentication, method, reason)
            return
        credentials = self._credentials(method, response.auth_data)
        self.spawn(self._reauthenticate(authentication, method, credentials))

    async def _reauthenticate(
        self, authentication: AuthenticationService, method: str, credentials: Credentials
    ) -> None:
        result = await self._check(authentication, method, credentials)
        if result is None or not self.is_open:
            return
        if result.role != self.auth_role:
            log.warning(
                "closing connection from %s: the role cannot change on a refresh (was %s, got %s)",
                self.remote_address,
                self.auth_role,
                result.role,
            )
            self.close()
            return
        authentication.successes += 1
        self.auth_expires_at = result.expires_at
        self._auth_challenge_pending = False
        log.info("refreshed the credentials of %s (role %s)", self.remote_address, result.role)


def _auth_challenge(method: str, protocol_version: int) -> bytes:
    cmd = T(type=T.AUTH_CHALLENGE)
    challenge = cmd.auth_challenge
    challenge.server_version = SERVER_VERSION
    challenge.challenge.auth_method_name = method
    challenge.challenge.auth_data = REFRESH_AUTH_DATA
    challenge.protocol_version = protocol_version
    return encode_command(cmd)
