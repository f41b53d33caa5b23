"""Checks that a service URL's broker answers before a command starts a client.

A Pulsar client retries a refused connection until its operation timeout; a command line
should say at once that the broker is not there (exit code 3).
"""

from __future__ import annotations

import socket
import urllib.parse

from starquake.cli.output import CannotConnect

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
