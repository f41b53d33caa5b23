"""The broker's authentication service: providers by method name, the anonymous role, the
web port's authentication, and the periodic check of expiring credentials.

With ``authenticationEnabled``, the providers named in ``authenticationProviders`` (Pulsar's
class names ``org.apache.pulsar.broker.authentication.AuthenticationProviderToken``,
``...Basic``, ``...Tls``, or the method names ``token``, ``basic``, ``tls``) authenticate
clients by the method they name:

- binary protocol: CONNECT's ``auth_method_name`` and ``auth_data``. A client that presents no
  credentials (no method, or ``none``), or names a method no provider serves, gets
  ``anonymousUserRole`` when it is set and is refused otherwise (as Pulsar does).
- web port: ``Authorization: Bearer <token>`` (token), ``Authorization: Basic
  base64(user:password)`` (basic), or a verified client certificate on HTTPS (tls). Wrong
  credentials are refused (401) even when an anonymous role is set; no credentials get the
  anonymous role. ``/metrics`` is served without credentials unless
  ``authenticateMetricsEndpoint`` is true (as in Pulsar; its role is then None); presented
  credentials are still checked.

Every ``authenticationRefreshCheckSeconds`` the connections are asked to check their
credentials' expiry (see ``ServerCnx.check_credentials_expiry``).

A refusal is answered at once (an ERROR on the binary port, 401 on the web port), but the
connection lingers ``authenticationRefusalLingerSeconds`` before the broker closes it, reading
nothing meanwhile (at most :data:`MAX_LINGERING_REFUSALS` linger at once; beyond that they close
at once): a client that reopens its connection whenever the broker closes it (a password
guesser, or a client with stale credentials in a reconnect loop) makes a few attempts a second
per connection rather than hundreds, and costs the broker and the machine correspondingly less.
A well-behaved client closes on the error itself and never notices. Good credentials are never
delayed.

Refusals are logged, at most :data:`LOGGED_FAILURES_PER_WINDOW` lines per
:data:`FAILURE_LOG_WINDOW` seconds (then one line counting the rest), so that a storm of wrong
credentials cannot flood the log.
"""

from __future__ import annotations

import asyncio
import base64
import binascii
import importlib
import logging
import re
import time
from collections.abc import Callable, Iterable
from typing import TYPE_CHECKING, Protocol

from starquake.broker.config import BrokerConfig, ConfigError
from starquake.broker.security.provider import (
    AuthenticationError,
    AuthenticationProvider,
    AuthResult,
    Credentials,
)
from starquake.broker.security.tls import request_common_name
from starquake.broker.web import WebAuthenticationError

if TYPE_CHECKING:
    from aiohttp import web

__all__ = [
    "AuthResult",
    "AuthenticationError",
    "AuthenticationService",
    "Credentials",
    "provider_method",
]

log = logging.getLogger(__name__)

# method -> (module, class): a provider's module (and the libraries it needs: PyJWT and
# cryptography, passlib) is imported only when a broker enables it, so that a broker without
# authentication starts faster
_PROVIDERS: dict[str, tuple[str, str]] = {
    "token": ("starquake.broker.security.auth_token", "TokenAuthenticationProvider"),
    "basic": ("starquake.broker.security.auth_basic", "BasicAuthenticationProvider"),
    "tls": ("starquake.broker.security.auth_tls", "TlsAuthenticationProvider"),
}


def _provider_class(method: str) -> Callable[[BrokerConfig], AuthenticationProvider]:
    module, name = _PROVIDERS[method]
    provider: Callable[[BrokerConfig], AuthenticationProvider] = getattr(
        importlib.import_module(module), name
    )
    return provider


_PULSAR_PACKAGE = "org.apache.pulsar.broker.authentication."
_PULSAR_CLASSES = {
    "AuthenticationProviderToken": "token",
    "AuthenticationProviderBasic": "basic",
    "AuthenticationProviderTls": "tls",
}
NO_CREDENTIALS = ("", "none")
UNAUTHENTICATED_PATHS = re.compile(r"/metrics/?|/status\.html|/|/dashboard/[^/]+")
"""Paths served without credentials: metrics (as Pulsar does, unless
``authenticateMetricsEndpoint``), the load balancers' ``/status.html`` probe, and the dashboard's
page and its static files (they hold no data; the summary they read needs credentials)."""
MAX_LINGERING_REFUSALS = 4096
FAILURE_LOG_WINDOW = 10.0
LOGGED_FAILURES_PER_WINDOW = 10


def provider_method(name: str) -> str:
    """The method name (``token``, ``basic``, ``tls``) of a provider named in
    ``authenticationProviders``; ConfigError if unknown."""
    given = name.strip()
    short = given.removeprefix(_PULSAR_PACKAGE)
    if short in _PULSAR_CLASSES:
        return _PULSAR_CLASSES[short]
    if given.lower() in _PROVIDERS:
        return given.lower()
    known = ", ".join([*(_PULSAR_PACKAGE + c for c in _PULSAR_CLASSES), *_PROVIDERS])
    raise ConfigError(f"authenticationProviders: unknown provider {given!r} (known: {known})")


class ExpiringConnection(Protocol):
    """A connection whose credentials may expire (``ServerCnx``)."""

    def check_credentials_expiry(self, now: float) -> None:
        """Challenge or close the connection if its credentials expired by ``now``."""


class AuthenticationService:
    """Authenticates clients of the binary and web ports with the configured providers."""

    def __init__(
        self,
        providers: dict[str, AuthenticationProvider],
        anonymous_role: str | None = None,
        refresh_check_seconds: float = 60,
        authenticate_metrics: bool = False,
        refusal_linger: float = 2.0,
    ) -> None:
        self.providers = providers
        self.authenticate_metrics = authenticate_metrics
        """``authenticateMetricsEndpoint``: ``/metrics`` needs credentials like any path."""
        self.anonymous_role = anonymous_role or None
        self.refresh_check_seconds = refresh_check_seconds
        self.successes = 0
        self.failures = 0
        self.refusal_linger = refusal_linger
        """Seconds a refused connection stays open (reading nothing) before it is closed."""
        self.lingering = 0
        """Refused connections lingering now."""
        self._window_start = 0.0
        self._window_logged = 0
        self._window_suppressed = 0

    @classmethod
    def from_config(cls, config: BrokerConfig) -> AuthenticationService | None:
        """The service ``config`` asks for (None when ``authenticationEnabled`` is off); reads
        key and password files. ConfigError names the setting that is wrong."""
        if not config.authenticationEnabled:
            return None
        methods: list[str] = []
        for name in config.authenticationProviders.split(","):
            if name.strip():
                method = provider_method(name)
                if method not in methods:
                    methods.append(method)
        providers: dict[str, AuthenticationProvider] = {}
        try:
            for method in methods:
                providers[method] = _provider_class(method)(config)
        except BaseException:
            for provider in providers.values():
                provider.close()
            raise
        if not providers and not config.anonymousUserRole:
            log.warning(
                "authenticationEnabled without authenticationProviders nor anonymousUserRole: "
                "every client will be refused"
            )
        log.info(
            "authentication on: providers %s%s",
            ", ".join(providers) or "(none)",
            f", anonymous role {config.anonymousUserRole!r}" if config.anonymousUserRole else "",
        )
        return cls(
            providers,
            config.anonymousUserRole,
            config.authenticationRefreshCheckSeconds,
            config.authenticateMetricsEndpoint,
            config.authenticationRefusalLingerSeconds,
        )

    # --- authenticating ------------------------------------------------------------------------

    async def authenticate(self, method: str, credentials: Credentials) -> AuthResult:
        """The role of a client that presents ``credentials`` for ``method`` (``none`` or
        empty: no credentials). Raises :class:`AuthenticationError`."""
        if method in NO_CREDENTIALS:
            if self.anonymous_role is not None:
                return AuthResult(self.anonymous_role, "none")
            raise AuthenticationError("authentication required: no credentials were presented")
        provider = self.providers.get(method)
        if provider is None and self.anonymous_role is not None:
            # as Pulsar: a method no provider serves gets the anonymous role (authorization
            # then decides what it may do)
            return AuthResult(self.anonymous_role, "none")
        if provider is None:
            enabled = ", ".join(self.providers) or "none"
            raise AuthenticationError(
                f"authentication method {method!r} is not enabled (enabled: {enabled})"
            )
        return await provider.authenticate(credentials)

    async def authenticate_http(self, request: web.Request) -> str | None:
        """The role of a web request (the ``WebServer.authenticate`` hook); raises
        WebAuthenticationError (401). None for a request without credentials to a path that
        needs none (``/metrics`` unless ``authenticateMetricsEndpoint``, ``/status.html``, the
        dashboard's page)."""
        remote = request.remote or "?"
        try:
            method, credentials = _http_credentials(request, "tls" in self.providers)
        except AuthenticationError as exc:
            self.refused(remote, "http", str(exc))
            raise WebAuthenticationError(f"Authentication failed: {exc}", self.linger) from None
        try:
            result = await self.authenticate(method, credentials)
        except AuthenticationError as exc:
            if (
                method == "none"
                and UNAUTHENTICATED_PATHS.fullmatch(request.path)
                and not (self.authenticate_metrics and request.path.startswith("/metrics"))
            ):
                return None
            self.refused(remote, method, str(exc))
            raise WebAuthenticationError(f"Authentication failed: {exc}", self.linger) from None
        self.successes += 1
        return result.role

    async def check_authorization(self, header: str, remote: str) -> None:
        """Raise WebAuthenticationError (401) when the credentials of the web request header
        ``Authorization: <header>`` from address ``remote`` are refused (the
        ``WebServer.refuse_early`` hook; a refusal is counted and logged as
        :meth:`authenticate_http` does, an acceptance is left to it)."""
        try:
            method, credentials = _header_credentials(header, remote)
        except AuthenticationError as exc:
            self.refused(remote or "?", "http", str(exc))
            raise WebAuthenticationError(f"Authentication failed: {exc}", self.linger) from None
        try:
            await self.authenticate(method, credentials)
        except AuthenticationError as exc:
            self.refused(remote or "?", method, str(exc))
            raise WebAuthenticationError(f"Authentication failed: {exc}", self.linger) from None

    # --- expiry ----------------------------------------------------------------------------------

    async def refresh_loop(self, connections: Callable[[], Iterable[ExpiringConnection]]) -> None:
        """Every ``authenticationRefreshCheckSeconds``, let each connection check whether its
        credentials expired (runs until cancelled)."""
        while True:
            await asyncio.sleep(self.refresh_check_seconds)
            now = time.time()
            for cnx in list(connections()):
                try:
                    cnx.check_credentials_expiry(now)
                except Exception:
                    log.exception("checking the credentials of a connection failed")

    # --- logging ---------------------------------------------------------------------------------

    def refused(self, remote: str, method: str, reason: str) -> None:
        """Count and log (rate-limited) a refused authentication."""
        self.failures += 1
        now = time.monotonic()
        if now - self._window_start >= FAILURE_LOG_WINDOW:
            if self._window_suppressed:
                log.warning(
                    "%d more authentication failures in %.0f s were not logged",
                    self._window_suppressed,
                    FAILURE_LOG_WINDOW,
                )
            self._window_start = now
            self._window_logged = 0
            self._window_suppressed = 0
        if self._window_logged < LOGGED_FAILURES_PER_WINDOW:
            self._window_logged += 1
            log.info("authentication of %s (method %s) failed: %s", remote, method, reason)
        else:
            self._window_suppressed += 1

    def close_refused(self, close: Callable[[], None]) -> None:
        """Run ``close`` (of a connection whose refusal was sent) after :attr:`refusal_linger`
        seconds, or at once when too many refused connections already linger."""
        if self.refusal_linger <= 0 or self.lingering >= MAX_LINGERING_REFUSALS:
            close()
            return
        self.lingering += 1

        def fire() -> None:
            self.lingering -= 1
            close()

        asyncio.get_running_loop().call_later(self.refusal_linger, fire)

    async def linger(self) -> None:
        """Wait :attr:`refusal_linger` seconds before a refused web connection closes (its 401
        already sent), or not at all when too many refused connections already linger."""
        if self.refusal_linger <= 0 or self.lingering >= MAX_LINGERING_REFUSALS:
            return
        self.lingering += 1
        try:
            await asyncio.sleep(self.refusal_linger)
        finally:
            self.lingering -= 1

    def close(self) -> None:
        """Stop the providers' worker threads."""
        for provider in self.providers.values():
            provider.close()


def _http_credentials(request: web.Request, tls: bool) -> tuple[str, Credentials]:
    """(method, credentials) of a web request (``tls``: look at its client certificate)."""
    header = request.headers.get("Authorization", "").strip()
    if header:
        return _header_credentials(header, request.remote or "")
    if tls:
        common_name = request_common_name(request)
        if common_name is not None:
            return "tls", Credentials(tls_common_name=common_name)
    return "none", Credentials()


def _header_credentials(header: str, remote: str) -> tuple[str, Credentials]:
    """(method, credentials) of an ``Authorization`` header's value."""
    scheme, _, value = header.strip().partition(" ")
    value = value.strip()
    kind = scheme.lower()
    if kind == "bearer":
        data = value.encode("utf-8", "replace")
        method = "token"
    elif kind == "basic":
        try:
            data = base64.b64decode(value, validate=True)
        except (binascii.Error, ValueError):
            raise AuthenticationError("the Basic credentials are not base64") from None
        method = "basic"
    else:
        raise AuthenticationError(f"unsupported Authorization scheme {scheme!r}")
    return method, Credentials(data, source=remote)
