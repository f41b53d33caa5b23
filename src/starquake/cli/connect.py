"""Checks that a service URL's broker answers before a command starts a client, and the TLS
options of the command groups that connect to a broker.

A Pulsar client retries a refused connection until its operation timeout; a command line
should say at once that the broker is not there (exit code 3).
"""

from __future__ import annotations

import socket
import urllib.parse
from collections.abc import Callable
from typing import Any, TypeVar

import click

from starquake.cli.output import CannotConnect

F = TypeVar("F", bound=Callable[..., Any])

DEFAULT_SERVICE_URL = "pulsar://localhost:6650"
_DEFAULT_PORTS = {"pulsar": 6650, "pulsar+ssl": 6651, "http": 80, "https": 443}


def service_hosts(url: str) -> list[tuple[str, int]]:
    """The ``(host, port)`` pairs of ``pulsar://h1:p1,h2:p2`` (or an http URL); ValueError if
    malformed."""
    scheme, sep, rest = url.partition("://")
    if not sep or scheme not in _DEFAULT_PORTS:
        raise ValueError(f"invalid service URL {url!r}: expected pulsar://host:port")
    hosts = rest.split("/", 1)[0]
    pairs: list[tuple[str, int]] = []
    for item in hosts.split(","):
        parsed = urllib.parse.urlsplit(f"//{item}")
        try:
            port = parsed.port or _DEFAULT_PORTS[scheme]
        except ValueError:
            raise ValueError(f"invalid service URL {url!r}: bad port in {item!r}") from None
        if not parsed.hostname:
            raise ValueError(f"invalid service URL {url!r}: no host in {item!r}")
        pairs.append((parsed.hostname, port))
    return pairs


def check_reachable(url: str, timeout: float = 5.0) -> None:
    """Raise :class:`CannotConnect` unless some host of ``url`` accepts a TCP connection."""
    reason = "no host"
    for host, port in service_hosts(url):
        try:
            with socket.create_connection((host, port), timeout=timeout):
                return
        except socket.gaierror as exc:
            reason = exc.strerror or str(exc)
        except TimeoutError:
            reason = "timed out"
        except OSError as exc:
            reason = exc.strerror or str(exc)
    raise CannotConnect(f"cannot connect to {url}: {reason}")


_TLS_META = "starquake.tls"
_TLS_FLAGS = {
    # option name -> keyword argument of Client and PulsarAdmin
    "tls_trust_cert_path": "tls_trust_certs_file_path",
    "tls_allow_insecure": "tls_allow_insecure_connection",
    "tls_enable_hostname_verification": "tls_validate_hostname",
}


def _remember_tls(ctx: click.Context, param: click.Parameter, value: Any) -> Any:
    if param.name is not None:
        ctx.meta.setdefault(_TLS_META, {})[_TLS_FLAGS[param.name]] = value
    return value


def tls_options(command: F) -> F:
    """The TLS options of a command group (``pulsar+ssl://`` and ``https://`` URLs), as
    Pulsar's command-line tools take them; read them back with :func:`tls_args`."""
    options = [
        click.option(
            "--tls-trust-cert-path",
            envvar="STARQUAKE_TLS_TRUST_CERT_PATH",
            default=None,
            expose_value=False,
            callback=_remember_tls,
            help="CA certificates (PEM) the broker's certificate must chain to "
            "(default: the system's; also $STARQUAKE_TLS_TRUST_CERT_PATH)",
        ),
        click.option(
            "--tls-allow-insecure",
            is_flag=True,
            expose_value=False,
            callback=_remember_tls,
            help="accept any broker certificate (no verification)",
        ),
        click.option(
            "--tls-enable-hostname-verification",
            is_flag=True,
            expose_value=False,
            callback=_remember_tls,
            help="also check that the broker's certificate names its host",
        ),
    ]
    for option in reversed(options):
        command = option(command)
    return command


def tls_args(ctx: click.Context) -> dict[str, Any]:
    """The TLS options given to the command's group, as keyword arguments of ``Client`` and
    ``PulsarAdmin``."""
    return dict(ctx.meta.get(_TLS_META, {}))
