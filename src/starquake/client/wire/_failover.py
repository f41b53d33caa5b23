"""Service discovery and failover between clusters: ``ServiceInfo``, ``ServiceInfoProvider``
and ``AutoClusterFailover``, as in the official client 3.13.

A client created with a provider asks it for the initial service info, then hands it a
callback through which the provider reports a change at any time (from any thread): the client
then closes its connections, and its producers and consumers reconnect to the new cluster.
``AutoClusterFailover`` is such a provider: it probes the primary cluster every
``check_interval_ms``, moves to the first reachable secondary after ``failover_threshold``
failed probes in a row, and back after ``switch_back_threshold`` successful probes of the
primary in a row.
"""

from __future__ import annotations

import contextlib
import logging
import socket
import threading
from collections.abc import Callable

from starquake.client.base._arg_checks import check_type, check_type_or_none
from starquake.client.base._auth import Authentication
from starquake.client.base._logging import CLIENT_LOGGER_NAME
from starquake.client.exceptions import InvalidUrl
from starquake.client.wire._pool import check_service_url, parse_service_url

log = logging.getLogger(CLIENT_LOGGER_NAME)

_PROBE_TIMEOUT_SECONDS = 5.0  # at most; a shorter check interval bounds it too


class ServiceInfo:
    """Connection information for one Pulsar cluster: its service URL, the authentication
    and the TLS trust store to use there."""

    def __init__(
        self,
        service_url: str,
        authentication: Authentication | None = None,
        tls_trust_certs_file_path: str | None = None,
    ) -> None:
        check_type(str, service_url, "service_url")
        check_type_or_none(Authentication, authentication, "authentication")
        check_type_or_none(str, tls_trust_certs_file_path, "tls_trust_certs_file_path")
        with contextlib.suppress(InvalidUrl):  # HTTP lookup URLs: refused when connecting
            check_service_url(service_url)
        self._service_url = service_url
        self._authentication = authentication
        self._tls_trust_certs_file_path = tls_trust_certs_file_path

    @property
    def service_url(self) -> str:
        """The cluster's service URL."""
        return self._service_url

    @property
    def use_tls(self) -> bool:
        """True for a ``pulsar+ssl://`` (or ``https://``) service URL."""
        return self._service_url.startswith(("pulsar+ssl://", "https://"))

    @property
    def tls_trust_certs_file_path(self) -> str | None:
        """The trust store for TLS connections to this cluster."""
        return self._tls_trust_certs_file_path

    @property
    def authentication(self) -> Authentication | None:
        """The authentication used with this cluster."""
        return self._authentication

    def __repr__(self) -> str:
        return (
            f"ServiceInfo(service_url={self.service_url!r}, use_tls={self.use_tls!r}, "
            f"tls_trust_certs_file_path={self.tls_trust_certs_file_path!r})"
        )


ServiceInfoCallback = Callable[[ServiceInfo], None]


class ServiceInfoProvider:
    """Base class of service discovery and failover providers written in Python.

    Subclasses return the initial :class:`ServiceInfo` and may keep the callback given to
    :meth:`initialize` to report later changes to the client.
    """

    def initial_service_info(self) -> ServiceInfo:
        """The service info the client starts with."""
        raise NotImplementedError

    def initialize(self, on_service_info_update: ServiceInfoCallback) -> None:
        """Called once by the client; ``on_service_info_update(info)`` switches it."""
        raise NotImplementedError

    def close(self) -> None:
        """Stop background work; called when the client closes."""
        return None


class AutoClusterFailover:
    """Automatic failover between clusters for :class:`Client`: ``primary`` is preferred,
    ``secondary`` are the fallbacks in order, probed every ``check_interval_ms``; failover
    after ``failover_threshold`` failed probes of the primary in a row, switch back after
    ``switch_back_threshold`` successful ones."""

    def __init__(
        self,
        primary: ServiceInfo,
        secondary: list[ServiceInfo],
        check_interval_ms: int = 5000,
        failover_threshold: int = 1,
        switch_back_threshold: int = 1,
    ) -> None:
        check_type(ServiceInfo, primary, "primary")
        check_type(list, secondary, "secondary")
        check_type(int, check_interval_ms, "check_interval_ms")
        check_type(int, failover_threshold, "failover_threshold")
        check_type(int, switch_back_threshold, "switch_back_threshold")
        if not secondary:
            raise ValueError("Argument secondary is expected to contain at least one ServiceInfo")
        for index, info in enumerate(secondary):
            if not isinstance(info, ServiceInfo):
                raise ValueError(
                    f"Argument secondary[{index}] is expected to be of type 'ServiceInfo' "
                    f"and not '{type(info).__name__}'"
                )
        for name, value in (
            ("check_interval_ms", check_interval_ms),
            ("failover_threshold", failover_threshold),
            ("switch_back_threshold", switch_back_threshold),
        ):
            if value <= 0:
                raise ValueError(f"Argument {name} is expected to be greater than 0")
        self.primary = primary
        self.secondary = list(secondary)
        self.check_interval_ms = check_interval_ms
        self.failover_threshold = failover_threshold
        self.switch_back_threshold = switch_back_threshold

    def __repr__(self) -> str:
        return (
            f"AutoClusterFailover(primary={self.primary!r}, secondary={self.secondary!r}, "
            f"check_interval_ms={self.check_interval_ms!r}, "
            f"failover_threshold={self.failover_threshold!r}, "
            f"switch_back_threshold={self.switch_back_threshold!r})"
        )


def reachable(info: ServiceInfo, timeout: float) -> bool:
    """Whether a TCP connection to one of the service URL's hosts opens within ``timeout``."""
    try:
        hosts = parse_service_url(info.service_url)
    except (InvalidUrl, ValueError):
        return False
    for host, port in hosts:
        try:
            with socket.create_connection((host, port), timeout=timeout):
                return True
        except OSError:
            continue
    return False


class AutoFailoverProvider(ServiceInfoProvider):
    """The provider behind :class:`AutoClusterFailover`: a daemon thread probes the clusters
    (blocking connects, off the client's event loop) and reports each switch."""

    def __init__(self, config: AutoClusterFailover) -> None:
        self._config = config
        self._interval = config.check_interval_ms / 1000
        self._timeout = min(self._interval, _PROBE_TIMEOUT_SECONDS)
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def initial_service_info(self) -> ServiceInfo:
        return self._config.primary

    def initialize(self, on_service_info_update: ServiceInfoCallback) -> None:
        self._thread = threading.Thread(
            target=self._run, args=(on_service_info_update,), name="starquake-failover"
        )
        self._thread.daemon = True
        self._thread.start()

    def close(self) -> None:
        self._stop.set()

    def _run(self, switch: ServiceInfoCallback) -> None:
        primary = self._config.primary
        current, failures, successes = primary, 0, 0
        while not self._stop.wait(self._interval):
            if reachable(primary, self._timeout):
                failures, successes = 0, successes + 1
            else:
                failures, successes = failures + 1, 0
            if current is primary:
                if failures < self._config.failover_threshold:
                    continue
                target = self._first_reachable_secondary(exclude=None)
            elif successes >= self._config.switch_back_threshold:
                target = primary
            elif reachable(current, self._timeout):
                continue
            else:  # the secondary in use went away too: another one, if any answers
                target = self._first_reachable_secondary(exclude=current)
            if target is None or self._stop.is_set():
                continue
            log.info("cluster failover: switching from %s to %s", current, target)
            current, failures, successes = target, 0, 0
            switch(target)

    def _first_reachable_secondary(self, exclude: ServiceInfo | None) -> ServiceInfo | None:
        for info in self._config.secondary:
            if info is not exclude and reachable(info, self._timeout):
                return info
        return None


def service_provider(
    service_url: object, authentication: object, tls_trust_certs_file_path: object
) -> ServiceInfoProvider | None:
    """The provider ``service_url`` names (None for a URL), with the official checks."""
    if isinstance(service_url, str):
        return None
    if not isinstance(service_url, AutoClusterFailover | ServiceInfoProvider):
        raise ValueError(
            "Argument service_url is expected to be of type 'str', 'AutoClusterFailover' or "
            "'ServiceInfoProvider'"
        )
    for name, value in (
        ("authentication", authentication),
        ("tls_trust_certs_file_path", tls_trust_certs_file_path),
    ):
        if value is not None:
            raise ValueError(
                f"Argument {name} is not supported when service_url is an AutoClusterFailover "
                f"or ServiceInfoProvider; set {name} on each ServiceInfo instead"
            )
    if isinstance(service_url, AutoClusterFailover):
        return AutoFailoverProvider(service_url)
    return service_url


def initial_service_info(provider: ServiceInfoProvider) -> ServiceInfo:
    info = provider.initial_service_info()
    if not isinstance(info, ServiceInfo):
        raise ValueError("Expected a pulsar.ServiceInfo or _pulsar.ServiceInfo instance")
    return info
