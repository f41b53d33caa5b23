"""``ServiceInfo``, ``AutoClusterFailover``, ``ServiceInfoProvider`` and the ``Client``
checks that come with them, with both clients: the same bad arguments raise the same
exception types; a provider's initial info and its updates are what ``get_service_info``
returns."""

from __future__ import annotations

import types
from collections.abc import Callable
from typing import Any

import pytest

UNREACHABLE = "pulsar://127.0.0.1:9"  # nothing listens on the discard port here


def _outcome(make: Callable[[], Any]) -> str:
    try:
        make()
    except Exception as exc:
        return type(exc).__name__
    return "ok"


def _service_info_cases(mod: types.ModuleType) -> dict[str, Callable[[], Any]]:
    info = mod.ServiceInfo
    return {
        "url-int": lambda: info(5),
        "url-no-scheme": lambda: info("localhost:6650"),
        "url-http": lambda: info("http://localhost:8080"),
        "auth-str": lambda: info(UNREACHABLE, authentication="token"),
        "trust-int": lambda: info(UNREACHABLE, tls_trust_certs_file_path=3),
        "ok-tls": lambda: info("pulsar+ssl://localhost:6651", None, "/ca.pem"),
        "ok-token": lambda: info(UNREACHABLE, mod.AuthenticationToken("t")),
    }


def _failover_cases(mod: types.ModuleType) -> dict[str, Callable[[], Any]]:
    one = mod.ServiceInfo(UNREACHABLE)
    auto = mod.AutoClusterFailover
    return {
        "primary-str": lambda: auto(UNREACHABLE, [one]),
        "secondary-empty": lambda: auto(one, []),
        "secondary-tuple": lambda: auto(one, (one,)),
        "secondary-item": lambda: auto(one, [one, UNREACHABLE]),
        "interval-zero": lambda: auto(one, [one], 0),
        "interval-float": lambda: auto(one, [one], 1.5),
        "failover-zero": lambda: auto(one, [one], failover_threshold=0),
        "failover-str": lambda: auto(one, [one], failover_threshold="1"),
        "switch-back-negative": lambda: auto(one, [one], switch_back_threshold=-1),
        "ok": lambda: auto(one, [one], 100, 2, 3),
    }


def _client_cases(mod: types.ModuleType) -> dict[str, Callable[[], Any]]:
    one = mod.ServiceInfo(UNREACHABLE)

    class NotInfo(mod.ServiceInfoProvider):  # type: ignore[name-defined,misc]
        def initial_service_info(self) -> Any:
            return UNREACHABLE

        def initialize(self, on_update: Any) -> None:
            pass

    class Unimplemented(mod.ServiceInfoProvider):  # type: ignore[name-defined,misc]
        pass

    def client(*args: Any, **kwargs: Any) -> Any:
        return mod.Client(*args, **kwargs).close()

    return {
        "url-int": lambda: client(5),
        "failover-with-auth": lambda: client(
            mod.AutoClusterFailover(one, [one]), authentication=mod.AuthenticationToken("t")
        ),
        "failover-with-trust": lambda: client(
            mod.AutoClusterFailover(one, [one]), tls_trust_certs_file_path="/ca.pem"
        ),
        "provider-with-auth": lambda: client(
            NotInfo(), authentication=mod.AuthenticationToken("t")
        ),
        "provider-not-info": lambda: client(NotInfo()),
        "provider-unimplemented": lambda: client(Unimplemented()),
        "failover-ok": lambda: client(mod.AutoClusterFailover(one, [one])),
    }


@pytest.mark.parametrize("cases", [_service_info_cases, _failover_cases, _client_cases])
def test_argument_checks_raise_the_official_exception_types(
    cases: Callable[[types.ModuleType], dict[str, Callable[[], Any]]],
) -> None:
    import pulsar

    import starquake.client

    official = {name: _outcome(make) for name, make in cases(pulsar).items()}
    ours = {name: _outcome(make) for name, make in cases(starquake.client).items()}
    assert ours == official
    assert "ok" in official.values() and set(official.values()) != {"ok"}


def test_service_info_properties_and_provider_updates(mod: types.ModuleType) -> None:
    info = mod.ServiceInfo("pulsar+ssl://localhost:6651", None, "/ca.pem")
    assert (info.service_url, info.use_tls, info.tls_trust_certs_file_path) == (
        "pulsar+ssl://localhost:6651",
        True,
        "/ca.pem",
    )
    events: list[str] = []

    class Provider(mod.ServiceInfoProvider):  # type: ignore[name-defined,misc]
        def initial_service_info(self) -> Any:
            return mod.ServiceInfo("pulsar://127.0.0.1:9")

        def initialize(self, on_update: Any) -> None:
            events.append("initialize")
            self.update = on_update

        def close(self) -> None:
            events.append("close")

    provider = Provider()
    client = mod.Client(provider)
    assert client.get_service_info().service_url == "pulsar://127.0.0.1:9"
    provider.update(mod.ServiceInfo("pulsar://127.0.0.1:7"))
    assert client.get_service_info().service_url == "pulsar://127.0.0.1:7"
    client.close()
    assert events == ["initialize", "close"]
