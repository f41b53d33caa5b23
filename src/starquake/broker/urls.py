"""The addresses a broker advertises: its plaintext and TLS service URLs, for lookups, the
cluster's registration data and the admin API; and the named ``advertisedListeners``."""

from __future__ import annotations

from dataclasses import dataclass


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
