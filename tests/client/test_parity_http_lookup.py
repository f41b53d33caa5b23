"""``http://`` and ``https://`` service URLs, with both clients: topics are looked up over the
broker's web port (with the credentials of every authentication method and the TLS settings),
then produced and consumed over the binary port the lookup names."""

from __future__ import annotations

import re
import types
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from auth_support import (
    BASIC_PROVIDER,
    HASHES,
    hs256,
    htpasswd,
    secret_key,
    token_broker,
)
from tls_certs import Pki, make_pki
from tls_setup import make_tls_auth_broker, round_trip, tls_broker

from starquake.broker.embedded import EmbeddedBroker


def _topic(prefix: str = "http") -> str:
    return f"persistent://public/default/{prefix}-{uuid.uuid4().hex[:10]}"


def _client(mod: types.ModuleType, url: str, timeout: int = 10, **settings: Any) -> Any:
    return mod.Client(
        url,
        operation_timeout_seconds=timeout,
        logger=mod.ConsoleLogger(mod.LoggerLevel.Error),
        **settings,
    )


def _round_trip(mod: types.ModuleType, client: Any) -> None:
    """Produce messages to a new topic and consume them back, in order, with ``client``."""
    round_trip(client, mod.InitialPosition.Earliest, 5)


def _failure(mod: types.ModuleType, url: str, **settings: Any) -> Exception:
    client = _client(mod, url, timeout=3, **settings)
    try:
        client.create_producer(_topic())
    except Exception as exc:
        return exc
    finally:
        client.close()
    raise AssertionError("the producer was created")


@pytest.fixture(scope="module")
def pki(tmp_path_factory: pytest.TempPathFactory) -> Pki:
    return make_pki(tmp_path_factory.mktemp("pki"))


def test_plain_http(mod: types.ModuleType, broker: EmbeddedBroker) -> None:
    assert broker.web_service_url.startswith("http://")
    client = _client(mod, broker.web_service_url)
    try:
        topic = _topic()
        _round_trip(mod, client)
        assert client.get_topic_partitions(topic) == [topic]
    finally:
        client.close()


def test_partitioned_topic_over_http(mod: types.ModuleType, broker: EmbeddedBroker) -> None:
    topic = _topic("http-part")
    broker.create_partitioned_topic(topic, 3)
    client = _client(mod, broker.web_service_url)
    try:
        assert client.get_topic_partitions(topic) == [f"{topic}-partition-{i}" for i in range(3)]
        consumer = client.subscribe(topic, "sub", initial_position=mod.InitialPosition.Earliest)
        producer = client.create_producer(topic)
        for i in range(30):
            producer.send(f"m-{i}".encode(), partition_key=f"k{i}")
        received = [consumer.receive(10_000) for _ in range(30)]
        assert sorted(m.data() for m in received) == sorted(f"m-{i}".encode() for i in range(30))
        assert {m.topic_name() for m in received} == {f"{topic}-partition-{i}" for i in range(3)}
    finally:
        client.close()


def test_regex_subscription_over_http(mod: types.ModuleType, broker: EmbeddedBroker) -> None:
    prefix = f"http-re-{uuid.uuid4().hex[:8]}"
    partitioned = f"persistent://public/default/{prefix}-p"
    broker.create_partitioned_topic(partitioned, 2)
    client = _client(mod, broker.web_service_url)
    try:
        plain = f"persistent://public/default/{prefix}-a"
        producers = [client.create_producer(t) for t in (plain, partitioned)]
        consumer = client.subscribe(
            re.compile(f"persistent://public/default/{prefix}-.*"),
            "sub",
            initial_position=mod.InitialPosition.Earliest,
        )
        other = client.create_producer(_topic("http-other"))
        other.send(b"not matched")
        for i, producer in enumerate(producers):
            producer.send(f"from-{i}".encode())
        got = sorted(consumer.receive(10_000).data() for _ in range(2))
        assert got == [b"from-0", b"from-1"]
        with pytest.raises(mod.Timeout):
            consumer.receive(500)
    finally:
        client.close()


def test_known_listener_name_over_http(mod: types.ModuleType, tmp_path: Path) -> None:
    with EmbeddedBroker(tmp_path / "data", advertisedListeners="internal:") as broker:
        client = _client(mod, broker.web_service_url, listener_name="internal")
        try:
            _round_trip(mod, client)
        finally:
            client.close()


def test_http_error_status_is_a_connect_error(
    mod: types.ModuleType, broker: EmbeddedBroker
) -> None:
    client = _client(mod, broker.web_service_url, timeout=3)
    try:
        with pytest.raises(mod.ConnectError):
            client.create_producer("persistent://public/nowhere/t")
        with pytest.raises(mod.ConnectError):
            client.subscribe("persistent://public/nowhere/t", "sub")
    finally:
        client.close()


def test_unreachable_web_port_times_out(mod: types.ModuleType, broker: EmbeddedBroker) -> None:
    port = broker.web_service_url.rsplit(":", 1)[1]
    broker.stop()
    assert isinstance(_failure(mod, f"http://127.0.0.1:{port}"), mod.Timeout)


# --- https -------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def tls(tmp_path_factory: pytest.TempPathFactory, pki: Pki) -> Iterator[EmbeddedBroker]:
    with tls_broker(tmp_path_factory.mktemp("tls") / "data", pki) as running:
        yield running


@pytest.mark.parametrize("validate_hostname", [False, True])
def test_https_with_the_trusted_ca(
    mod: types.ModuleType, tls: EmbeddedBroker, pki: Pki, validate_hostname: bool
) -> None:
    url = tls.web_service_url_tls
    assert url.startswith("https://")
    client = _client(
        mod,
        url,
        tls_trust_certs_file_path=str(pki.ca_cert),
        tls_validate_hostname=validate_hostname,
    )
    try:
        topic = _topic()
        _round_trip(mod, client)
        assert client.get_topic_partitions(topic) == [topic]
    finally:
        client.close()


def test_https_with_an_untrusted_ca(mod: types.ModuleType, tls: EmbeddedBroker, pki: Pki) -> None:
    url = tls.web_service_url_tls
    exc = _failure(mod, url, tls_trust_certs_file_path=str(pki.untrusted_ca_cert))
    assert isinstance(exc, mod.LookupError), exc
    insecure = _client(
        mod,
        url,
        tls_trust_certs_file_path=str(pki.untrusted_ca_cert),
        tls_allow_insecure_connection=True,
    )
    try:
        _round_trip(mod, insecure)
    finally:
        insecure.close()


def test_https_host_name_validation(mod: types.ModuleType, tmp_path: Path, pki: Pki) -> None:
    """The broker's certificate names 127.0.0.1 and localhost; a broker on 127.0.0.2 serves
    it all the same: refused with host name validation, accepted without."""
    with tls_broker(tmp_path / "data", pki, bindAddress="127.0.0.2") as broker:
        url = broker.web_service_url_tls
        assert url.startswith("https://127.0.0.2:")
        ca = str(pki.ca_cert)
        exc = _failure(mod, url, tls_trust_certs_file_path=ca, tls_validate_hostname=True)
        assert isinstance(exc, mod.LookupError), exc
        lenient = _client(mod, url, tls_trust_certs_file_path=ca)
        try:
            _round_trip(mod, lenient)
        finally:
            lenient.close()


# --- authentication over HTTP lookups -------------------------------------------------------


@pytest.fixture(scope="module")
def token_key() -> bytes:
    return secret_key()


@pytest.fixture(scope="module")
def token_web(
    tmp_path_factory: pytest.TempPathFactory, token_key: bytes
) -> Iterator[EmbeddedBroker]:
    with token_broker(tmp_path_factory.mktemp("token") / "data", token_key) as running:
        yield running


def test_token_over_http_lookup(
    mod: types.ModuleType, token_web: EmbeddedBroker, token_key: bytes
) -> None:
    token = hs256(token_key, "http-role")
    for auth in (mod.AuthenticationToken(token), mod.AuthenticationToken(lambda: token)):
        client = _client(mod, token_web.web_service_url, authentication=auth)
        try:
            _round_trip(mod, client)
        finally:
            client.close()
    bad = mod.AuthenticationToken(hs256(secret_key(), "intruder"))
    exc = _failure(mod, token_web.web_service_url, authentication=bad)
    assert isinstance(exc, mod.ConnectError), exc
    exc = _failure(mod, token_web.web_service_url)
    assert isinstance(exc, mod.ConnectError), exc


@pytest.fixture(scope="module")
def basic_web(tmp_path_factory: pytest.TempPathFactory) -> Iterator[EmbeddedBroker]:
    directory = tmp_path_factory.mktemp("basic")
    conf = htpasswd(directory / "htpasswd", {"http-user": HASHES["bcrypt"]("http-secret")})
    with EmbeddedBroker(
        directory / "data",
        authenticationEnabled=True,
        authenticationProviders=BASIC_PROVIDER,
        basicAuthConf=f"file://{conf}",
    ) as running:
        yield running


def test_basic_over_http_lookup(mod: types.ModuleType, basic_web: EmbeddedBroker) -> None:
    auth = mod.AuthenticationBasic("http-user", "http-secret")
    client = _client(mod, basic_web.web_service_url, authentication=auth)
    try:
        _round_trip(mod, client)
    finally:
        client.close()
    wrong = mod.AuthenticationBasic("http-user", "wrong")
    exc = _failure(mod, basic_web.web_service_url, authentication=wrong)
    assert isinstance(exc, mod.ConnectError), exc


@pytest.fixture(scope="module")
def tls_auth(tmp_path_factory: pytest.TempPathFactory, pki: Pki) -> Iterator[EmbeddedBroker]:
    with make_tls_auth_broker(tmp_path_factory.mktemp("tls-auth") / "data", pki) as running:
        yield running


def test_tls_authentication_over_https_lookup(
    mod: types.ModuleType, tls_auth: EmbeddedBroker, pki: Pki
) -> None:
    cert, key = pki.client("https-role")
    auth = mod.AuthenticationTLS(str(cert), str(key))
    url = tls_auth.web_service_url_tls
    client = _client(mod, url, authentication=auth, tls_trust_certs_file_path=str(pki.ca_cert))
    try:
        _round_trip(mod, client)
    finally:
        client.close()
    exc = _failure(mod, url, tls_trust_certs_file_path=str(pki.ca_cert))
    assert isinstance(exc, mod.PulsarException), exc
