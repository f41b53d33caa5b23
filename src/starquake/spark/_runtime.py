"""Running the asyncio client from Spark's synchronous Python code.

A :class:`Session` owns one event loop (kept between calls, so connections and readers live
across them) and one asyncio ``Client``. Spark runs the data source's methods in plain
Python processes, one call at a time, so nothing else runs on that loop meanwhile.

The client settings arrive as plain values (they are pickled to executors); the
authentication plugin and its parameters become an ``Authentication`` here, where the client
is made (:func:`client_kwargs`), and the admin HTTP calls take their TLS settings and
credentials from the same values (:func:`admin_http`).
"""

from __future__ import annotations

import asyncio
import ssl
from collections.abc import Coroutine, Mapping
from typing import Any, TypeVar

from starquake.client.asyncio import Client
from starquake.client.base._auth import Authentication, create_authentication
from starquake.common.tls import client_ssl_context

T = TypeVar("T")


def authentication_of(client_args: Mapping[str, Any]) -> Authentication | None:
    """The authentication named by the ``auth_plugin_class_name`` / ``auth_params`` settings,
    or None (both were checked when the query was planned)."""
    plugin = client_args.get("auth_plugin_class_name")
    if plugin is None:
        return None
    return create_authentication(str(plugin), str(client_args.get("auth_params") or ""))


def client_kwargs(client_args: Mapping[str, Any]) -> dict[str, Any]:
    """Keyword arguments of ``Client`` from the checked ``pulsar.client.*`` settings."""
    kwargs = dict(client_args)
    kwargs.pop("auth_plugin_class_name", None)
    kwargs.pop("auth_params", None)
    authentication = authentication_of(client_args)
    if authentication is not None:
        kwargs["authentication"] = authentication
    return kwargs


def admin_http(
    admin_url: str, client_args: Mapping[str, Any]
) -> tuple[ssl.SSLContext | None, dict[str, str]]:
    """(SSL context for an ``https://`` admin URL, else None; the credentials' HTTP headers)
    with the client's TLS settings and authentication (raises ``TlsSettingsError``, a
    ValueError, when a TLS file cannot be used)."""
    authentication = authentication_of(client_args)
    headers = authentication.http_headers() if authentication is not None else {}
    if not admin_url.startswith("https://"):
        return None, headers
    identity = authentication.tls_certificate_paths if authentication is not None else None
    cert, key = identity or (
        client_args.get("tls_certificate_file_path"),
        client_args.get("tls_private_key_file_path"),
    )
    context = client_ssl_context(
        trust_certs_file_path=client_args.get("tls_trust_certs_file_path"),
        allow_insecure_connection=bool(client_args.get("tls_allow_insecure_connection")),
        validate_hostname=bool(client_args.get("tls_validate_hostname")),
        certificate_file_path=cert,
        private_key_file_path=key,
    )
    return context, headers


class Session:
    """An event loop plus a client for ``service_url`` (created on first use)."""

    def __init__(self, service_url: str, client_args: Mapping[str, Any]) -> None:
        self._service_url = service_url
        self._client_args = client_kwargs(client_args)
        # A plain loop, not asyncio.Runner: the Runner re-installs its SIGINT handler around
        # every call from the main thread, which (in Python 3.11) formats the previous result
        # into text: megabytes per call when results are column batches.
        self._loop = asyncio.new_event_loop()
        self._client: Client | None = None

    @property
    def client(self) -> Client:
        if self._client is None:
            self._client = Client(self._service_url, **self._client_args)
        return self._client

    def run(self, coro: Coroutine[Any, Any, T]) -> T:
        """Run ``coro`` to completion on the session's loop."""
        return self._loop.run_until_complete(coro)

    def close(self) -> None:
        """Close the client and the loop (errors while closing are not the caller's concern)."""
        try:
            if self._client is not None:
                self.run(self._client.close())
        except Exception:  # closing after a failure: the original error matters more
            pass
        finally:
            self._client = None
            self._loop.close()

    def __enter__(self) -> Session:
        return self

    def __exit__(self, *_exc: object) -> None:
        self.close()
