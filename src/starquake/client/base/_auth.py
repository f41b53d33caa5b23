"""Client authentication, with the official client's classes and constructors.

- :class:`AuthenticationToken`: a JWT (method ``token``), given as a string, as ``file:///path``
  (read again at every use, so a rotated file is picked up), or as a function returning one
  (a *supplier*, called at every connect and whenever the broker asks for fresh credentials).
- :class:`AuthenticationBasic`: a user and password (method ``basic``; sent as ``user:password``
  on the binary protocol, ``Authorization: Basic`` over HTTP).
- :class:`AuthenticationTLS`: a client certificate and key, presented in the TLS handshake
  (method ``tls``; the broker takes the certificate's common name as the role).
- :class:`Authentication`: Pulsar's plugin form, ``Authentication(plugin, params)``, with the
  plugin's class name (``org.apache.pulsar.client.impl.auth.AuthenticationToken``, ...) or
  short name (``token``, ``basic``, ``tls``) and its parameter string (``token:xxx``,
  ``file:///path``, ``{"userId": "u", "password": "p"}``, ``tlsCertFile:/c.pem,tlsKeyFile:/k.pem``).
"""

from __future__ import annotations

import asyncio
import base64
import json
import os
from collections.abc import Callable

from starquake.common.key_url import file_url_path

__all__ = [
    "Authentication",
    "AuthenticationBasic",
    "AuthenticationTLS",
    "AuthenticationToken",
    "create_authentication",
]

_PLUGIN_PACKAGE = "org.apache.pulsar.client.impl.auth."
_PLUGINS = {
    "authenticationtoken": "token",
    "token": "token",
    "authenticationbasic": "basic",
    "basic": "basic",
    "authenticationtls": "tls",
    "tls": "tls",
}


class Authentication:
    """An authentication method; ``Authentication(plugin, params)`` builds one from Pulsar's
    plugin name and parameter string (see the module docstring)."""

    def __init__(self, dynamicLibPath: str, authParamsString: str) -> None:
        """Types are checked here (ValueError); a plugin or parameters that are not
        understood fail when the client connects (AuthenticationError), as in the official
        client, which loads the plugin then."""
        for name, value in (
            ("dynamicLibPath", dynamicLibPath),
            ("authParamsString", authParamsString),
        ):
            if not isinstance(value, str):
                raise ValueError(
                    f"Argument {name} is expected to be of type 'str' and not "
                    f"'{type(value).__name__}'"
                )
        self._delegate: Authentication
        try:
            self._delegate = create_authentication(dynamicLibPath, authParamsString)
        except ValueError as exc:
            self._delegate = _Unusable(str(exc))

    @property
    def method_name(self) -> str:
        """The method named in CONNECT (``token``, ``basic``, ``tls``)."""
        return self._delegate.method_name

    def command_data(self) -> bytes:
        """The credentials sent in CONNECT and AUTH_RESPONSE (may read a file or call a
        supplier: call it off the event loop, or through :meth:`credentials`)."""
        return self._delegate.command_data()

    def http_headers(self) -> dict[str, str]:
        """The HTTP headers that carry the credentials (the admin API)."""
        return self._delegate.http_headers()

    @property
    def tls_certificate_paths(self) -> tuple[str, str] | None:
        """(certificate, private key) to present in the TLS handshake, or None."""
        return self._delegate.tls_certificate_paths

    @property
    def blocking(self) -> bool:
        """Whether :meth:`command_data` may block (reads a file or calls a supplier)."""
        return self._delegate.blocking

    async def credentials(self) -> tuple[str, bytes]:
        """(method, data) for CONNECT or AUTH_RESPONSE, computed off the event loop when
        getting them may block."""
        if self.blocking:
            data = await asyncio.to_thread(self.command_data)
        else:
            data = self.command_data()
        return self.method_name, data


class AuthenticationToken(Authentication):
    """Token authentication: ``token`` is a JWT string, ``file:///path`` of a file holding
    one, or a function that returns one (called at every connect and refresh)."""

    def __init__(self, token: str | Callable[[], str]) -> None:
        if not (isinstance(token, str) or callable(token)):
            raise ValueError(
                "Argument token is expected to be of type 'str' or a function returning 'str'"
            )
        self._token = token

    @property
    def method_name(self) -> str:
        return "token"

    def token(self) -> str:
        """The current token (reads the file or calls the supplier)."""
        source = self._token
        if callable(source):
            value = source()
            if not isinstance(value, str):
                raise ValueError("the token supplier must return a str")
            return value.strip()
        if source.startswith("file:"):
            return file_url_path(source).read_text(encoding="utf-8").strip()
        return source

    def command_data(self) -> bytes:
        return self.token().encode()

    def http_headers(self) -> dict[str, str]:
        return {"Authorization": f"Bearer {self.token()}"}

    @property
    def tls_certificate_paths(self) -> tuple[str, str] | None:
        return None

    @property
    def blocking(self) -> bool:
        return callable(self._token) or self._token.startswith("file:")


class AuthenticationBasic(Authentication):
    """Basic authentication with a user and password (``method``: the method name sent,
    ``basic`` unless the broker's provider has another); or ``auth_params_string``, JSON with
    ``username`` (or ``userId``), ``password`` and optionally ``method``."""

    def __init__(
        self,
        username: str | None = None,
        password: str | None = None,
        method: str = "basic",
        auth_params_string: str | None = None,
    ) -> None:
        if auth_params_string is not None:
            if not isinstance(auth_params_string, str):
                raise ValueError("Argument auth_params_string is expected to be of type 'str'")
            params = _params(auth_params_string)
            username = params.get("username", params.get("userId"))
            password = params.get("password")
            method = params.get("method", "basic")
            if username is None or password is None:
                raise ValueError("basic authentication parameters need username and password")
        for name, value in (("username", username), ("password", password), ("method", method)):
            if not isinstance(value, str):
                raise ValueError(f"Argument {name} is expected to be of type 'str'")
        assert username is not None and password is not None
        self.username = username
        self._password = password
        self._method = method

    @property
    def method_name(self) -> str:
        return self._method

    def command_data(self) -> bytes:
        return f"{self.username}:{self._password}".encode()

    def http_headers(self) -> dict[str, str]:
        encoded = base64.b64encode(self.command_data()).decode("ascii")
        return {"Authorization": f"Basic {encoded}"}

    @property
    def tls_certificate_paths(self) -> tuple[str, str] | None:
        return None

    @property
    def blocking(self) -> bool:
        return False


class AuthenticationTLS(Authentication):
    """TLS authentication: the client certificate (PEM) and its private key, presented in the
    TLS handshake of a ``pulsar+ssl://`` (or ``https://``) connection."""

    def __init__(self, certificate_path: str, private_key_path: str) -> None:
        for name, value in (
            ("certificate_path", certificate_path),
            ("private_key_path", private_key_path),
        ):
            if not isinstance(value, str):
                raise ValueError(f"Argument {name} is expected to be of type 'str'")
        self.certificate_path = certificate_path
        self.private_key_path = private_key_path

    @property
    def method_name(self) -> str:
        return "tls"

    def command_data(self) -> bytes:
        return b""

    def http_headers(self) -> dict[str, str]:
        return {}

    @property
    def tls_certificate_paths(self) -> tuple[str, str] | None:
        return self.certificate_path, self.private_key_path

    @property
    def blocking(self) -> bool:
        return False


class _Unusable(Authentication):
    """A plugin form that could not be understood: every use raises its ValueError (which
    the client reports as AuthenticationError)."""

    def __init__(self, problem: str) -> None:
        self._problem = problem

    @property
    def method_name(self) -> str:
        raise ValueError(self._problem)

    def command_data(self) -> bytes:
        raise ValueError(self._problem)

    def http_headers(self) -> dict[str, str]:
        raise ValueError(self._problem)

    @property
    def tls_certificate_paths(self) -> tuple[str, str] | None:
        return None

    @property
    def blocking(self) -> bool:
        return False


def create_authentication(plugin: str, params: str) -> Authentication:
    """An authentication from Pulsar's plugin name and parameter string (ValueError if
    either is not understood)."""
    name = plugin.strip()
    kind = _PLUGINS.get(name.removeprefix(_PLUGIN_PACKAGE).lower())
    if kind is None:
        known = "token, basic, tls, " + ", ".join(
            _PLUGIN_PACKAGE + c for c in ("AuthenticationToken", "AuthenticationBasic")
        )
        raise ValueError(f"unknown authentication plugin {plugin!r} (known: {known}, ...Tls)")
    text = params.strip()
    if kind == "token":
        return AuthenticationToken(_token_source(text))
    if kind == "basic":
        return AuthenticationBasic(auth_params_string=text)
    values = _params(text)
    cert, key = values.get("tlsCertFile"), values.get("tlsKeyFile")
    if not cert or not key:
        raise ValueError("TLS authentication parameters need tlsCertFile and tlsKeyFile")
    return AuthenticationTLS(cert, key)


def _token_source(text: str) -> str:
    """The token (or ``file:`` URL) of a token plugin's parameter string: ``token:xxx``,
    ``file:///path``, ``env:VAR``, ``{"token": ...}``/``{"file": ...}``, or the token."""
    if text.startswith("token:"):
        return text[len("token:") :].strip()
    if text.startswith("env:"):
        name = text[len("env:") :].strip()
        value = os.environ.get(name)
        if value is None:
            raise ValueError(f"environment variable {name} (token) is not set")
        return value.strip()
    if text.startswith("{"):
        values = _params(text)
        if "token" in values:
            return values["token"]
        if "file" in values:
            file = values["file"]
            return file if file.startswith("file:") else f"file://{file}"
        raise ValueError('token parameters need "token" or "file"')
    if not text:
        raise ValueError("no token given")
    return text


def _params(text: str) -> dict[str, str]:
    """A parameter string as a map: JSON, or ``key:value,key:value`` (Pulsar's two forms)."""
    if text.startswith("{"):
        try:
            loaded = json.loads(text)
        except json.JSONDecodeError as exc:
            raise ValueError(f"authentication parameters are not valid JSON: {exc}") from None
        if not isinstance(loaded, dict):
            raise ValueError("authentication parameters must be a JSON object")
        return {str(k): str(v) for k, v in loaded.items()}
    values: dict[str, str] = {}
    for item in text.split(","):
        key, sep, value = item.partition(":")
        if sep and key.strip():
            values[key.strip()] = value.strip()
    return values
