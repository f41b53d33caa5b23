"""A provisioning script written for Pulsar works unchanged on a broker process: clusters are
created and updated through the admin API (and kept across restarts); at first start with
authorization on, tenant ``public`` and namespace ``public/default`` are left for the script
to create with its own roles and grants (as the official client's CI provisions Pulsar); Avro
schemas evolve as Pulsar lets them (a record may change its name)."""

from __future__ import annotations

import base64
import json
import uuid
from pathlib import Path
from typing import Any

import pulsar
import pytest
from authz_setup import SECRET, TOKEN_PROVIDER, call
from broker_process import BrokerProcess, broker_process
from pulsar.schema import AvroSchema


def _rest(
    broker: BrokerProcess, method: str, path: str, role: str | None = None, body: Any = None
) -> tuple[int, Any]:
    """(status, JSON body) of ``method /admin/v2/path`` as ``role`` (no credentials: None)."""
    return call(broker, method, f"/admin/v2/{path}", role, body)  # type: ignore[arg-type]


SUPER_USER = "superUser"
SECURED = (
    "authenticationEnabled=true",
    f"authenticationProviders={TOKEN_PROVIDER}",
    "tokenSecretKey=data:;base64," + base64.b64encode(SECRET).decode(),
    "anonymousUserRole=anonymous",
    "authorizationEnabled=true",
    "superUserRoles=localhost,superUser,admin",
)
ANONYMOUS_GRANTS = {
    "auth_policies": {"namespace_auth": {"anonymous": ["produce", "consume"]}},
    "replication_clusters": ["standalone"],
}


def _provision(broker: BrokerProcess) -> list[int]:
    """The REST calls of the official Python client's CI, made as its super user."""
    cluster = {
        "serviceUrl": "http://localhost:8080/",
        "serviceUrlTls": "https://localhost:8443/",
        "brokerServiceUrl": "pulsar://localhost:6650/",
        "brokerServiceUrlTls": "pulsar+ssl://localhost:6651/",
    }
    public = {"adminRoles": ["anonymous"], "allowedClusters": ["standalone"]}
    private = {"adminRoles": [], "allowedClusters": ["standalone"]}
    calls = [
        ("clusters/standalone", cluster),
        ("tenants/public", public),
        ("namespaces/public/default", ANONYMOUS_GRANTS),
        ("namespaces/public/default-2", ANONYMOUS_GRANTS),
        ("tenants/private", private),
    ]
    return [_rest(broker, "PUT", path, SUPER_USER, body)[0] for path, body in calls]


def test_upstream_provisioning_at_first_start_with_authorization(tmp_path: Path) -> None:
    data = tmp_path / "data"
    with broker_process(data, *SECURED) as broker:
        # as Pulsar's standalone: public is administered by the super users, and public/default
        # is not created (the broker's own admin client, anonymous, may not create it)
        status, public = _rest(broker, "GET", "tenants/public", SUPER_USER)
        assert status == 200 and public["adminRoles"] == ["admin", "localhost", "superUser"]
        assert _rest(broker, "GET", "namespaces/public/default", SUPER_USER)[0] == 404
        assert _provision(broker) == [204] * 5
        assert _rest(broker, "PUT", "tenants/public", SUPER_USER, {"adminRoles": []})[0] == 409
        # anonymous now administers public and may produce and consume on public/default
        assert (
            _rest(broker, "POST", "namespaces/public/default/deduplication", None, True)[0] == 204
        )
        client = pulsar.Client(broker.url, operation_timeout_seconds=10)
        try:
            topic = f"provisioned-{uuid.uuid4().hex[:8]}"
            consumer = client.subscribe(topic, "sub")
            client.create_producer(topic).send(b"anonymous")
            assert consumer.receive(10000).data() == b"anonymous"
        finally:
            client.close()
        broker.stop()
        broker.start()
        # everything the script set is kept, the cluster as it was given
        status, cluster = _rest(broker, "GET", "clusters/standalone", SUPER_USER)
        assert status == 200 and cluster["brokerServiceUrl"] == "pulsar://localhost:6650/"
        assert _rest(broker, "GET", "tenants/public", SUPER_USER)[1]["adminRoles"] == ["anonymous"]
        grants = _rest(broker, "GET", "namespaces/public/default/permissions", "anonymous")
        assert grants == (200, {"anonymous": ["consume", "produce"]})


def test_first_start_with_a_broker_client_creates_public_default(tmp_path: Path) -> None:
    token_plugin = "org.apache.pulsar.client.impl.auth.AuthenticationToken"
    plugin = f"brokerClientAuthenticationPlugin={token_plugin}"
    with broker_process(tmp_path / "data", *SECURED, plugin) as broker:
        assert _rest(broker, "GET", "namespaces/public/default", SUPER_USER)[0] == 200


def test_first_start_without_authorization_creates_public_default(tmp_path: Path) -> None:
    with broker_process(tmp_path / "data") as broker:
        assert _rest(broker, "GET", "namespaces/public/default")[0] == 200
        # what the broker created itself yields to the first explicit creation
        assert _rest(broker, "PUT", "namespaces/public/default", None, ANONYMOUS_GRANTS)[0] == 204
        assert _rest(broker, "PUT", "namespaces/public/default", None, {})[0] == 409
        status, policies = _rest(broker, "GET", "namespaces/public/default")
        assert status == 200 and policies["replication_clusters"] == ["standalone"]


def test_cluster_endpoints(tmp_path: Path) -> None:
    other = {"serviceUrl": "http://other:8080", "brokerServiceUrl": "pulsar://other:6650"}
    with broker_process(tmp_path / "data", *SECURED) as broker:
        assert _rest(broker, "PUT", "clusters/other", "nobody", other)[0] == 403
        assert _rest(broker, "PUT", "clusters/other", SUPER_USER, other)[0] == 204
        assert _rest(broker, "PUT", "clusters/other", SUPER_USER, other)[0] == 409
        assert _rest(broker, "GET", "clusters", SUPER_USER) == (200, ["other", "standalone"])
        other["serviceUrlTls"] = "https://other:8443"
        assert _rest(broker, "POST", "clusters/other", SUPER_USER, other)[0] == 204
        assert _rest(broker, "POST", "clusters/missing", SUPER_USER, other)[0] == 404
        tenant = {"adminRoles": [], "allowedClusters": ["other"]}
        assert _rest(broker, "PUT", "tenants/remote", SUPER_USER, tenant)[0] == 204
        assert _rest(broker, "DELETE", "clusters/other", SUPER_USER)[0] == 412  # still allowed
        broker.stop()
        broker.start()
        assert _rest(broker, "GET", "clusters/other", SUPER_USER) == (200, other)
        assert _rest(broker, "DELETE", "tenants/remote", SUPER_USER)[0] == 204
        assert _rest(broker, "DELETE", "clusters/other", SUPER_USER)[0] == 204
        assert _rest(broker, "GET", "clusters/other", SUPER_USER)[0] == 404
        assert _rest(broker, "DELETE", "clusters/standalone", SUPER_USER)[0] == 412


USER1 = {"type": "record", "name": "User1", "fields": [{"name": "name", "type": "string"}]}
USER2 = {
    "type": "record",
    "name": "User2",
    "fields": [{"name": "name", "type": "string"}, {"name": "age", "type": "int", "default": 0}],
}


@pytest.mark.parametrize("strategy", ["BACKWARD", "FORWARD", "FULL"])
def test_a_record_may_change_its_name(tmp_path: Path, strategy: str) -> None:
    with broker_process(tmp_path / "data") as broker:
        path = "namespaces/public/default/schemaCompatibilityStrategy"
        assert _rest(broker, "PUT", path, None, strategy)[0] == 204
        client = pulsar.Client(broker.url, operation_timeout_seconds=10)
        try:
            topic = f"evolving-{uuid.uuid4().hex[:8]}"
            old = AvroSchema(None, schema_definition=USER1)
            client.create_producer(topic, schema=old).send({"name": "a"})
            # another record name, and a field added with a default: Pulsar accepts both
            new = AvroSchema(None, schema_definition=USER2)
            client.create_producer(topic, schema=new).send({"name": "b", "age": 3})
            reader = client.create_reader(topic, pulsar.MessageId.earliest, schema=new)
            assert [reader.read_next(10000).value() for _ in range(2)] == [
                {"name": "a", "age": 0},
                {"name": "b", "age": 3},
            ]
        finally:
            client.close()


def test_record_fields_still_have_to_match(tmp_path: Path) -> None:
    with broker_process(tmp_path / "data") as broker:
        client = pulsar.Client(broker.url, operation_timeout_seconds=10)
        try:
            topic = f"evolving-{uuid.uuid4().hex[:8]}"
            client.create_producer(topic, schema=AvroSchema(None, schema_definition=USER1))
            without_default = json.loads(json.dumps(USER2))
            del without_default["fields"][1]["default"]  # FULL: it cannot read data lacking age
            with pytest.raises(pulsar.IncompatibleSchema):
                client.create_producer(
                    topic, schema=AvroSchema(None, schema_definition=without_default)
                )
        finally:
            client.close()
