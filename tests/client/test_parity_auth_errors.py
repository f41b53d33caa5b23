"""Authentication and TLS configuration errors with both clients: which exception a producer's
creation raises when the credentials cannot be had or the client certificate cannot be used."""

from __future__ import annotations

import types
import uuid
from collections.abc import Iterator
from typing import Any

import pytest
from tls_certs import Pki, make_pki
from tls_setup import tls_broker

from starquake.broker.embedded import EmbeddedBroker


def _topic() -> str:
    return f"persistent://public/default/auth-err-{uuid.uuid4().hex[:10]}"


def _create_fails(mod: types.ModuleType, url: str, **settings: Any) -> Exception:
    client = mod.Client(
        url,
        operation_timeout_seconds=5,
        logger=mod.ConsoleLogger(mod.LoggerLevel.Error),
        **settings,
    )
    try:
        client.create_producer(_topic())
    except Exception as exc:
        return exc
    finally:
        client.close()
    raise AssertionError("the producer was created")


def _no_token() -> str:
    raise RuntimeError("the token store is down")


def test_a_token_supplier_that_raises(mod: types.ModuleType, broker: EmbeddedBroker) -> None:
    auth = mod.AuthenticationToken(_no_token)
    exc = _create_fails(mod, broker.service_url, authentication=auth)
    assert isinstance(exc, mod.AuthenticationError), exc


def test_a_token_supplier_that_raises_over_http_lookups(broker: EmbeddedBroker) -> None:
    """Ours only: the official client (3.13) aborts the process here (the supplier's
    exception reaches its C++ lookup thread)."""
    import starquake.client

    auth = starquake.client.AuthenticationToken(_no_token)
    exc = _create_fails(starquake.client, broker.web_service_url, authentication=auth)
    assert isinstance(exc, starquake.client.AuthenticationError), exc
    assert "the token store is down" in str(exc)


def test_an_unknown_plugin_fails_when_used(mod: types.ModuleType, broker: EmbeddedBroker) -> None:
    auth = mod.Authentication("someoldjunk.so", "whatever")  # no error yet
    exc = _create_fails(mod, broker.service_url, authentication=auth)
    assert isinstance(exc, mod.AuthenticationError), exc


@pytest.mark.parametrize("args", [(5, "x"), ("token", None)])
def test_plugin_arguments_of_the_wrong_type(mod: types.ModuleType, args: tuple[Any, Any]) -> None:
    with pytest.raises(ValueError):
        mod.Authentication(*args)


@pytest.fixture(scope="module")
def pki(tmp_path_factory: pytest.TempPathFactory) -> Pki:
    return make_pki(tmp_path_factory.mktemp("pki"))


@pytest.fixture(scope="module")
def tls(tmp_path_factory: pytest.TempPathFactory, pki: Pki) -> Iterator[EmbeddedBroker]:
    with tls_broker(tmp_path_factory.mktemp("tls") / "data", pki) as running:
        yield running


@pytest.mark.parametrize("url", ["service_url_tls", "web_service_url_tls"])
@pytest.mark.parametrize("how", ["settings", "AuthenticationTLS"])
def test_swapped_certificate_and_key_files(
    mod: types.ModuleType, tls: EmbeddedBroker, pki: Pki, url: str, how: str
) -> None:
    cert, key = pki.client("swapped")
    settings: dict[str, Any] = {"tls_trust_certs_file_path": str(pki.ca_cert)}
    if how == "settings":
        settings |= {"tls_certificate_file_path": str(key), "tls_private_key_file_path": str(cert)}
    else:
        settings["authentication"] = mod.AuthenticationTLS(str(key), str(cert))
    exc = _create_fails(mod, getattr(tls, url), **settings)
    # the binary handshake fails with ConnectError, an HTTPS lookup with LookupError
    expected = mod.ConnectError if url == "service_url_tls" else mod.LookupError
    assert isinstance(exc, expected), exc
