"""The addresses a broker advertises: its plaintext and TLS service URLs, for lookups, the
cluster's registration data and the admin API; and the named ``advertisedListeners``."""

from __future__ import annotations

from dataclasses import dataclass

from starquake.broker.errors import BrokerServiceError
from starquake.protocol.errors import ServerError


@dataclass(frozen=True)
class BrokerUrls:
    """This broker's URLs; "" for a port that is off."""

    service_url: str = ""
    """``pulsar://host:port`` of the plaintext binary port."""
    service_url_tls: str = ""
    """``pulsar+ssl://host:port`` of the TLS binary port."""
    web_service_url: str = ""
    """``http://host:port`` of the plaintext web port."""
    web_service_url_tls: str = ""
    """``https://host:port`` of the HTTPS web port."""

    @property
    def any_service_url(self) -> str:
        """The plaintext binary URL, or the TLS one when the plaintext port is off."""
        return self.service_url or self.service_url_tls

    @property
    def any_web_service_url(self) -> str:
        """The plaintext web URL, or the HTTPS one when the plaintext web port is off."""
        return self.web_service_url or self.web_service_url_tls


@dataclass(frozen=True)
class LookupUrls:
    """Where a lookup sends a client: the broker's binary URLs ("" when not offered)."""

    broker_url: str
    broker_url_tls: str


def parse_advertised_listeners(text: str) -> dict[str, LookupUrls]:
    """``advertisedListeners`` (``name:pulsar://h:p,name:pulsar+ssl://h:p,...``) as
    ``{name: LookupUrls}``; a listener named without a ``pulsar://`` or ``pulsar+ssl://`` URL
    maps to empty URLs (the broker's own are used)."""
    listeners: dict[str, LookupUrls] = {}
    for item in text.split(","):
        name, _, url = item.strip().partition(":")
        if not name:
            continue
        known = listeners.get(name, LookupUrls("", ""))
        if url.startswith("pulsar://"):
            known = LookupUrls(url, known.broker_url_tls)
        elif url.startswith("pulsar+ssl://"):
            known = LookupUrls(known.broker_url, url)
        listeners[name] = known
    return listeners


def listener_urls(urls: BrokerUrls, advertised_listeners: str, listener_name: str) -> LookupUrls:
    """The broker URLs a lookup answers for a client of ``listener_name`` ("": none): that
    listener's from ``advertisedListeners`` (the broker's own where it gives none). As Pulsar
    does, a lookup naming a listener the broker does not advertise fails (ServiceNotReady)."""
    own = LookupUrls(urls.service_url, urls.service_url_tls)
    if not listener_name:
        return own
    listeners = parse_advertised_listeners(advertised_listeners)
    if listener_name not in listeners:
        raise BrokerServiceError(  # ServiceNotReady, as Pulsar: the client retries
            f"The broker does not have a listener named {listener_name!r} "
            f"(advertisedListeners: {advertised_listeners or 'none'})",
            ServerError.ServiceNotReady,
        )
    listener = listeners[listener_name]
    return listener if listener.broker_url or listener.broker_url_tls else own
