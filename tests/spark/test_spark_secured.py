"""The ``pulsar`` data source against a secured broker: TLS only (no plaintext ports), token
authentication and authorization on; and the checks of the security options, without Spark."""

from __future__ import annotations

import json
import pickle
import time
import urllib.request
from collections.abc import Iterator
from typing import Any

import pytest
from auth_support import TOKEN_PROVIDER, data_url, hs256, secret_key
from tls_certs import Pki, make_pki
from tls_setup import client_context, tls_broker

from starquake.broker.embedded import EmbeddedBroker
from starquake.client import AuthenticationToken
from starquake.spark._options import PulsarOptionError, read_options, write_options
from starquake.spark._runtime import admin_http, client_kwargs
from starquake.spark._sink import PulsarSinkError, ensure_deduplication

KEY = secret_key()
SUPER_USER = "admin"
JAVA_TOKEN_PLUGIN = "org.apache.pulsar.client.impl.auth.AuthenticationToken"


class Secured:
    """The running broker, its certificates, and the options that reach it."""

    def __init__(self, broker: EmbeddedBroker, pki: Pki) -> None:
        self.broker = broker
        self.pki = pki

    def options(self, token: str, **extra: str) -> dict[str, str]:
        """Java-style option names: TLS with the test CA (host names checked) and ``token``."""
        return {
            "service.url": self.broker.service_url_tls,
            "admin.url": self.broker.web_service_url_tls,
            "pulsar.client.tlsTrustCertsFilePath": str(self.pki.ca_cert),
            "pulsar.client.tlsHostnameVerificationEnable": "true",
            "pulsar.client.authPluginClassName": JAVA_TOKEN_PLUGIN,
            "pulsar.client.authParams": f"token:{token}",
            "pulsar.client.operationTimeoutMs": "5000",
            "pollTimeoutMs": "20000",
            **extra,
        }


@pytest.fixture(scope="module")
def secured(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Secured]:
    directory = tmp_path_factory.mktemp("secured")
    pki = make_pki(directory / "pki")
    broker = tls_broker(
        directory / "data",
        pki,
        brokerServicePort=-1,
        webServicePort=-1,
        authenticationEnabled=True,
        authenticationProviders=TOKEN_PROVIDER,
        tokenSecretKey=data_url(KEY),
        authorizationEnabled=True,
        superUserRoles=SUPER_USER,
        # the broker's own client is the super user: it creates public/default at first start
        brokerClientAuthenticationPlugin="org.apache.pulsar.client.impl.auth.AuthenticationToken",
        brokerClientAuthenticationParameters=f"token:{hs256(KEY, SUPER_USER)}",
    )
    with broker:
        assert broker.service_url.startswith("pulsar+ssl://")  # no plaintext port
        yield Secured(broker, pki)


def _deduplication(secured: Secured) -> Any:
    request = urllib.request.Request(
        f"{secured.broker.web_service_url_tls}/admin/v2/namespaces/public/default/deduplication",
        headers={"Authorization": f"Bearer {hs256(KEY, SUPER_USER)}"},
    )
    context = client_context(secured.pki.ca_cert)
    with urllib.request.urlopen(request, timeout=10, context=context) as resp:
        return json.loads(resp.read())


def test_exactly_once_write_and_read_over_tls_with_a_token(
    spark: Any, secured: Secured, new_topic: str
) -> None:
    df = spark.range(300).selectExpr(
        "concat('v', cast(id as string)) as value", "cast(id % 7 as string) as __key"
    )
    writer = df.repartition(2).write.format("pulsar").mode("append")
    for key, value in secured.options(hs256(KEY, SUPER_USER), topic=new_topic).items():
        writer = writer.option(key, value)
    writer.save()  # exactly-once (the default): the sink turned deduplication on over https
    assert _deduplication(secured) is True

    # the Python client's names for the same settings, and the plugin's short name
    reader = spark.read.format("pulsar")
    options = {
        "service.url": secured.broker.service_url_tls,
        "topic": new_topic,
        "pulsar.client.tls_trust_certs_file_path": str(secured.pki.ca_cert),
        "pulsar.client.tls_validate_hostname": "true",
        "pulsar.client.auth_plugin_class_name": "token",
        "pulsar.client.auth_params": hs256(KEY, SUPER_USER),
    }
    for key, value in options.items():
        reader = reader.option(key, value)
    rows = reader.load().select("value", "__key").collect()
    assert sorted((bytes(r["value"]).decode(), r["__key"]) for r in rows) == sorted(
        (f"v{i}", str(i % 7)) for i in range(300)
    )


def _admin_post(secured: Secured, path: str, body: Any) -> None:
    request = urllib.request.Request(
        f"{secured.broker.web_service_url_tls}/admin/v2/{path}",
        data=json.dumps(body).encode(),
        method="POST",
        headers={
            "Authorization": f"Bearer {hs256(KEY, SUPER_USER)}",
            "Content-Type": "application/json",
        },
    )
    with urllib.request.urlopen(request, timeout=10, context=client_context(secured.pki.ca_cert)):
        pass


def test_a_role_with_produce_permission_writes_exactly_once(
    spark: Any, secured: Secured, new_topic: str
) -> None:
    _admin_post(secured, "namespaces/public/default/permissions/writer", ["produce"])
    _admin_post(secured, "namespaces/public/default/deduplication", True)
    df = spark.range(200).selectExpr("concat('v', cast(id as string)) as value").repartition(2)
    for admin in (True, False):  # admin.url given (its GET is refused: 403) or not given
        # produce permission only: no sink subscription (that needs consume permission)
        options = secured.options(
            hs256(KEY, "writer"), topic=new_topic, writeId="w", sinkSubscription=""
        )
        if not admin:
            del options["admin.url"]
        writer = df.write.format("pulsar").mode("append")
        for key, value in options.items():
            writer = writer.option(key, value)
        writer.save()
    reader = spark.read.format("pulsar")
    for key, value in secured.options(hs256(KEY, SUPER_USER), topic=new_topic).items():
        reader = reader.option(key, value)
    values = sorted(bytes(r["value"]) for r in reader.load().select("value").collect())
    assert values == sorted(f"v{i}".encode() for i in range(200))


def test_a_read_with_a_wrong_token_fails_at_once_naming_authentication(
    spark: Any, secured: Secured, new_topic: str
) -> None:
    reader = spark.read.format("pulsar")
    for key, value in secured.options(hs256(secret_key(), SUPER_USER), topic=new_topic).items():
        reader = reader.option(key, value)
    start = time.monotonic()
    with pytest.raises(Exception, match=r"planning the read failed: .*[Aa]uthenticat"):
        reader.load().collect()
    assert time.monotonic() - start < 30


def test_the_sink_admin_call_uses_the_tls_settings_and_the_credentials(
    secured: Secured, new_topic: str
) -> None:
    good = write_options({"topic": new_topic, **secured.options(hs256(KEY, SUPER_USER))})
    assert good.admin_url is not None
    assert ensure_deduplication(good.admin_url, new_topic, 10, good.client_args)
    # no credentials: the broker's 401 and its reason
    anonymous = write_options(
        {k: v for k, v in secured.options("-", topic=new_topic).items() if "auth" not in k.lower()}
    )
    with pytest.raises(PulsarSinkError, match=r"option 'admin.url' .*HTTP 401"):
        ensure_deduplication(
            secured.broker.web_service_url_tls, new_topic, 10, anonymous.client_args
        )
    # a CA that did not sign the broker's certificate: refused in the handshake
    untrusted = write_options(
        {
            "topic": new_topic,
            **secured.options(hs256(KEY, SUPER_USER)),
            "pulsar.client.tlsTrustCertsFilePath": str(secured.pki.untrusted_ca_cert),
        }
    )
    with pytest.raises(PulsarSinkError, match=r"option 'admin.url' .*CERTIFICATE_VERIFY_FAILED"):
        ensure_deduplication(
            secured.broker.web_service_url_tls, new_topic, 10, untrusted.client_args
        )


# --- the options, without a broker ----------------------------------------------------------


def test_security_options_by_java_and_python_names() -> None:
    java = {
        "pulsar.client.authPluginClassName": JAVA_TOKEN_PLUGIN,
        "pulsar.client.authParams": "token:abc",
        "pulsar.client.useTls": "true",
        "pulsar.client.tlsTrustCertsFilePath": "/ca.pem",
        "pulsar.client.tlsAllowInsecureConnection": "FALSE",
        "pulsar.client.tlsHostnameVerificationEnable": "true",
        "pulsar.client.tlsCertificateFilePath": "/c.pem",
        "pulsar.client.tlsKeyFilePath": "/k.pem",
    }
    python = {
        "pulsar.client.auth_plugin_class_name": JAVA_TOKEN_PLUGIN,
        "pulsar.client.auth_params": "token:abc",
        "pulsar.client.use_tls": "true",
        "pulsar.client.tls_trust_certs_file_path": "/ca.pem",
        "pulsar.client.tls_allow_insecure_connection": "false",
        "pulsar.client.tls_validate_hostname": "true",
        "pulsar.client.tls_certificate_file_path": "/c.pem",
        "pulsar.client.tls_private_key_file_path": "/k.pem",
    }
    read = read_options({"topic": "t", **java}, streaming=False)
    assert read.client_args == read_options({"topic": "t", **python}, streaming=False).client_args
    assert read.client_args == {
        "auth_plugin_class_name": JAVA_TOKEN_PLUGIN,
        "auth_params": "token:abc",
        "use_tls": True,
        "tls_trust_certs_file_path": "/ca.pem",
        "tls_allow_insecure_connection": False,
        "tls_validate_hostname": True,
        "tls_certificate_file_path": "/c.pem",
        "tls_private_key_file_path": "/k.pem",
    }
    # plain values travel to the executors; the Authentication is made with the client
    assert pickle.loads(pickle.dumps(read)) == read
    kwargs = client_kwargs(read.client_args)
    assert isinstance(kwargs["authentication"], AuthenticationToken)
    assert kwargs["authentication"].http_headers() == {"Authorization": "Bearer abc"}
    assert "auth_params" not in kwargs and "auth_plugin_class_name" not in kwargs
    # the admin URL is never guessed from the service URL
    ssl_write = write_options({"topic": "t", "service.url": "pulsar+ssl://broker.example:6651"})
    assert ssl_write.admin_url is None
    assert admin_http("http://h:8080", {})[0] is None


@pytest.mark.parametrize(
    ("options", "message"),
    [
        ({"pulsar.client.authPluginClassName": "token"}, "needs 'pulsar.client.authParams'"),
        ({"pulsar.client.authParams": "token:x"}, "needs 'pulsar.client.authPluginClassName'"),
        (
            {"pulsar.client.authPluginClassName": "kerberos", "pulsar.client.authParams": "x"},
            "option 'pulsar.client.authPluginClassName': unknown authentication plugin",
        ),
        (
            {"pulsar.client.auth_plugin_class_name": "basic", "pulsar.client.auth_params": "{x"},
            "option 'pulsar.client.authParams': .*JSON",
        ),
        (
            {"pulsar.client.authPluginClassName": "tls", "pulsar.client.authParams": "a:b"},
            "option 'pulsar.client.authParams': .*tlsCertFile",
        ),
        (
            {"pulsar.client.tlsAllowInsecureConnection": "yes"},
            "'pulsar.client.tlsAllowInsecureConnection'",
        ),
        ({"pulsar.client.useTls": "1"}, "option 'pulsar.client.useTls'.*not true or false"),
        ({"pulsar.client.tlsTrustCerts": "/ca.pem"}, "unknown option"),
    ],
)
def test_bad_security_options_name_the_option(options: dict[str, str], message: str) -> None:
    with pytest.raises(PulsarOptionError, match=message):
        read_options({"topic": "t", **options}, streaming=False)
    with pytest.raises(PulsarOptionError, match=message):
        write_options({"topic": "t", **options})
