"""Authorization hardening, through a broker process and the official client: schema
registration needs produce permission on an existing topic and is bounded in size; the
namespace policy ``subscriptionAuthMode``; a tenant admin removed from ``adminRoles`` loses its
producers; unknown authentication methods get the anonymous role; topics of missing tenants are
TopicNotFound; the role of a certificate with several CNs is the one Pulsar picks."""

from __future__ import annotations

import base64
import contextlib
import json
import uuid
from collections.abc import Iterator
from typing import Any

import pulsar
import pytest
from authz_setup import SECRET, SUPER_USER, TOKEN_PROVIDER, call, token
from broker_process import BrokerProcess, free_port
from click.testing import CliRunner
from polling import wait_for
from pulsar.schema import AvroSchema, Record, String
from raw_connection import RawConnection
from tls_certs import Pki

from starquake.cli.main import cli
from starquake.protocol._generated import starquake_wire_pb2 as pb
from starquake.protocol.errors import ServerError

T = pb.BaseCommand
TLS_PROVIDER = "org.apache.pulsar.broker.authentication.AuthenticationProviderTls"
MAX_MESSAGE_SIZE = 65536


class Secured:
    """A broker process with token and TLS authentication, an anonymous role, authorization
    and tenant ``acme`` (namespace ``acme/app``) administered by ``acme-admin``."""

    def __init__(self, proc: BrokerProcess, tls_port: int) -> None:
        self.proc = proc
        self.tls_port = tls_port
        self.web_service_url = proc.web_service_url

    @contextlib.contextmanager
    def client(self, role: str | None, **kwargs: Any) -> Iterator[pulsar.Client]:
        """The official client, as ``role`` (a token) unless ``authentication`` is given."""
        if role is not None:
            kwargs["authentication"] = pulsar.AuthenticationToken(token(role))
        client = pulsar.Client(
            self.proc.url,
            operation_timeout_seconds=5,
            logger=pulsar.ConsoleLogger(pulsar.LoggerLevel.Error),
            **kwargs,
        )
        try:
            yield client
        finally:
            client.close()

    def rest(self, method: str, path: str, role: str | None, body: Any = None) -> tuple[int, Any]:
        return call(self, method, path, role, body)  # type: ignore[arg-type]


@pytest.fixture(scope="module")
def secured(tmp_path_factory: pytest.TempPathFactory, pki: Pki) -> Iterator[Secured]:
    data = tmp_path_factory.mktemp("hardening") / "data"
    tls_port = free_port()
    proc = BrokerProcess(
        data,
        "authenticationEnabled=true",
        f"authenticationProviders={TOKEN_PROVIDER},{TLS_PROVIDER}",
        "tokenSecretKey=data:;base64," + base64.b64encode(SECRET).decode(),
        "anonymousUserRole=anonymous",
        "authorizationEnabled=true",
        f"superUserRoles={SUPER_USER}",
        f"brokerServicePortTls={tls_port}",
        f"tlsCertificateFilePath={pki.broker_cert}",
        f"tlsKeyFilePath={pki.broker_key}",
        f"tlsTrustCertsFilePath={pki.ca_cert}",
        f"maxMessageSize={MAX_MESSAGE_SIZE}",
    )
    proc.start()
    try:
        running = Secured(proc, tls_port)
        tenant = {"adminRoles": ["acme-admin"], "allowedClusters": ["standalone"]}
        assert running.rest("PUT", "/admin/v2/tenants/acme", SUPER_USER, tenant)[0] == 204
        assert running.rest("PUT", "/admin/v2/namespaces/acme/app", SUPER_USER)[0] == 204
        yield running
    finally:
        proc.cleanup()


def _topic(prefix: str) -> str:
    return f"persistent://acme/app/{prefix}-{uuid.uuid4().hex[:8]}"


class User(Record):
    name = String()


def _avro_schema(record_name: str) -> pb.Schema:
    definition = {"type": "record", "name": record_name, "fields": [{"name": "x", "type": "int"}]}
    return pb.Schema(
        name=record_name, schema_data=json.dumps(definition).encode(), type=pb.Schema.Type.Avro
    )


def _get_or_create_schema(raw: RawConnection, topic: str, request_id: int) -> Any:
    cmd = T(type=T.GET_OR_CREATE_SCHEMA)
    cmd.get_or_create_schema.request_id = request_id
    cmd.get_or_create_schema.topic = topic
    cmd.get_or_create_schema.schema.CopyFrom(_avro_schema("Orders"))
    raw.send_command(cmd)
    reply = raw.next()
    assert reply.type == T.GET_OR_CREATE_SCHEMA_RESPONSE, reply
    return reply.get_or_create_schema_response


# --- A4: GET_OR_CREATE_SCHEMA -------------------------------------------------------------------


def test_schema_registration_needs_produce_on_an_existing_topic(secured: Secured) -> None:
    topic = _topic("orders")
    with RawConnection(secured.proc.port) as raw:
        raw.connect("token", token("nobody").encode())
        assert raw.next().type == T.CONNECTED
        # a tenant that does not exist (yet): TopicNotFound, nothing registered
        missing = _get_or_create_schema(raw, "persistent://future/ns/orders", 1)
        assert missing.error_code == ServerError.TopicNotFound
        # an existing topic, but the role may not produce there
        with secured.client("acme-admin") as admin:
            admin.create_producer(topic).close()
            denied = _get_or_create_schema(raw, topic, 2)
            assert denied.error_code == ServerError.AuthorizationError
            # nothing was registered: the admin's own producer with its schema is accepted
            admin.create_producer(topic, schema=AvroSchema(User)).close()
    status, stored = secured.rest("GET", f"/admin/v2/schemas/{topic[13:]}/schema", SUPER_USER)
    assert status == 200 and json.loads(stored["data"])["name"] == "User"


def test_schema_registration_with_produce_permission(secured: Secured) -> None:
    topic = _topic("granted")
    grant = f"/admin/v2/persistent/{topic[13:]}/permissions/writer"
    assert secured.rest("POST", grant, "acme-admin", ["produce"])[0] == 204
    with secured.client("acme-admin") as admin:
        admin.create_producer(topic).close()
    with RawConnection(secured.proc.port) as raw:
        raw.connect("token", token("writer").encode())
        assert raw.next().type == T.CONNECTED
        answer = _get_or_create_schema(raw, topic, 1)
        assert not answer.HasField("error_code") and answer.schema_version


def _big_avro_definition(minimum: int, maximum: int) -> str:
    """An Avro record definition between ``minimum`` and ``maximum`` bytes long."""
    fields: list[dict[str, str]] = []
    definition = ""
    while len(definition) < minimum:
        fields.append({"name": f"field_{len(fields)}", "type": "string"})
        definition = json.dumps({"type": "record", "name": "Big", "fields": fields})
    assert len(definition) <= maximum
    return definition


def _big_record(minimum: int, maximum: int) -> type[Record]:
    """A Record class whose Avro definition is between ``minimum`` and ``maximum`` bytes."""
    count = 0
    while True:
        count += 10
        big = type("Big", (Record,), {f"field_{i}": String() for i in range(count)})
        size = len(AvroSchema(big).schema_info().schema())
        if size >= minimum:
            assert size <= maximum
            return big


def test_schema_size_is_bounded_by_max_message_size(secured: Secured) -> None:
    topic = _topic("big")
    # over maxMessageSize, but within the frame a producer command may take
    definition = _big_avro_definition(MAX_MESSAGE_SIZE + 100, MAX_MESSAGE_SIZE + 4000)
    big = _big_record(MAX_MESSAGE_SIZE + 100, MAX_MESSAGE_SIZE + 4000)
    with secured.client("acme-admin") as admin:
        with pytest.raises(pulsar.IncompatibleSchema):
            admin.create_producer(topic, schema=AvroSchema(big))
        admin.create_producer(topic, schema=AvroSchema(User)).close()  # a small one is fine
    upload = {"type": "AVRO", "schema": definition, "properties": {}}
    status, reply = secured.rest(
        "POST", f"/admin/v2/schemas/{topic[13:]}-upload/schema", "acme-admin", upload
    )
    assert status == 422 and "maxMessageSize" in reply["reason"]


# --- A5: subscriptionAuthMode -------------------------------------------------------------------


def _admin_cli(secured: Secured, *args: str) -> tuple[int, str]:
    result = CliRunner().invoke(
        cli,
        [
            "admin",
            "--admin-url",
            secured.web_service_url,
            "--auth-plugin",
            "token",
            "--auth-params",
            f"token:{token('acme-admin')}",
            "--output",
            "json",
            *args,
        ],
    )
    return result.exit_code, result.stdout + result.stderr


def test_subscription_auth_mode_prefix(secured: Secured) -> None:
    assert secured.rest("PUT", "/admin/v2/namespaces/acme/prefixed", SUPER_USER)[0] == 204
    path = "/admin/v2/namespaces/acme/prefixed/subscriptionAuthMode"
    assert secured.rest("GET", path, "acme-admin") == (200, "None")
    grant = "/admin/v2/namespaces/acme/prefixed/permissions/alice"
    assert secured.rest("POST", grant, "acme-admin", ["consume"])[0] == 204
    topic = f"persistent://acme/prefixed/t-{uuid.uuid4().hex[:8]}"
    with secured.client("alice") as alice, secured.client("acme-admin") as admin:
        alice.subscribe(topic, "any-name").close()  # mode None: any name
        assert (
            _admin_cli(
                secured, "namespaces", "set-subscription-auth-mode", "acme/prefixed", "-m", "Prefix"
            )[0]
            == 0
        )
        assert secured.rest("GET", path, "acme-admin") == (200, "Prefix")
        code, out = _admin_cli(secured, "namespaces", "get-subscription-auth-mode", "acme/prefixed")
        assert code == 0 and json.loads(out) == "Prefix"
        with pytest.raises(pulsar.AuthorizationError):
            alice.subscribe(topic, "other-sub")
        alice.subscribe(topic, "alice-sub").close()  # named after the role
        admin.subscribe(topic, "whatever").close()  # tenant admins are exempt
    assert secured.rest("POST", path, "acme-admin", "Sometimes")[0] == 400


# --- A6: removing a tenant admin ----------------------------------------------------------------


def _publishers(secured: Secured, topic: str) -> int:
    status, stats = secured.rest("GET", f"/admin/v2/persistent/{topic[13:]}/stats", SUPER_USER)
    assert status == 200
    return len(stats["publishers"])


def test_removed_tenant_admin_loses_its_producers(secured: Secured) -> None:
    tenant = {"adminRoles": ["bob"], "allowedClusters": ["standalone"]}
    assert secured.rest("PUT", "/admin/v2/tenants/bobs", SUPER_USER, tenant)[0] == 204
    assert secured.rest("PUT", "/admin/v2/namespaces/bobs/ns", SUPER_USER)[0] == 204
    topic = f"persistent://bobs/ns/t-{uuid.uuid4().hex[:8]}"
    with secured.client("bob") as bob:
        producer = bob.create_producer(topic, send_timeout_millis=3000)
        producer.send(b"while admin")
        assert _publishers(secured, topic) == 1
        tenant["adminRoles"] = []
        assert secured.rest("POST", "/admin/v2/tenants/bobs", SUPER_USER, tenant)[0] == 204
        wait_for(lambda: _publishers(secured, topic) == 0, "the producer closed")
        with pytest.raises(pulsar.PulsarException):
            producer.send(b"no longer admin")


# --- A9: Pulsar's answers -----------------------------------------------------------------------


def test_unknown_authentication_method_gets_the_anonymous_role(secured: Secured) -> None:
    topic = _topic("anonymous")
    grant = f"/admin/v2/persistent/{topic[13:]}/permissions/anonymous"
    assert secured.rest("POST", grant, "acme-admin", ["produce", "consume"])[0] == 204
    auth = pulsar.AuthenticationBasic("user", "password", "unknown")
    with secured.client(None, authentication=auth) as client:
        consumer = client.subscribe(topic, "sub")
        client.create_producer(topic).send(b"as anonymous")
        assert consumer.receive(10000).data() == b"as anonymous"
        with pytest.raises(pulsar.AuthorizationError):
            client.create_producer(_topic("not-granted"))


def test_producer_on_a_missing_tenant_is_topic_not_found(secured: Secured) -> None:
    with secured.client("nobody") as client:
        with pytest.raises(pulsar.TopicNotFound):
            client.create_producer("persistent://no-such-tenant/ns/t")
        with pytest.raises(pulsar.TopicNotFound):
            client.subscribe("persistent://no-such-tenant/ns/t", "sub")
        with pytest.raises(pulsar.AuthorizationError):
            client.create_producer(_topic("existing-tenant"))


def test_certificate_with_several_common_names(secured: Secured, pki: Pki) -> None:
    # Pulsar reads the subject in RFC 2253 order (last RDN first): the last CN is the role
    cert, key = pki.client("first-cn,tls-writer")
    topic = _topic("tls")
    for role, actions in (("tls-writer", ["produce"]), ("first-cn", ["consume"])):
        grant = f"/admin/v2/persistent/{topic[13:]}/permissions/{role}"
        assert secured.rest("POST", grant, "acme-admin", actions)[0] == 204
    client = pulsar.Client(
        f"pulsar+ssl://127.0.0.1:{secured.tls_port}",
        authentication=pulsar.AuthenticationTLS(str(cert), str(key)),
        tls_trust_certs_file_path=str(pki.ca_cert),
        operation_timeout_seconds=5,
        logger=pulsar.ConsoleLogger(pulsar.LoggerLevel.Error),
    )
    try:
        client.create_producer(topic).send(b"as tls-writer")
        with pytest.raises(pulsar.AuthorizationError):
            client.subscribe(topic, "sub")
    finally:
        client.close()
