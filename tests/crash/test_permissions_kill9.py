"""Permission grants and revokes survive kill -9 of a broker process: a grant answered 204 is
in force after the restart, and so is a revoke (the official client is refused again)."""

from __future__ import annotations

import uuid
from pathlib import Path

import pulsar
import pytest
from auth_support import TOKEN_PROVIDER, data_url, hs256, secret_key
from broker_process import BrokerProcess

from starquake.admin import PulsarAdmin
from starquake.client import AuthenticationToken

KEY = secret_key()


def _broker(data_dir: Path) -> BrokerProcess:
    return BrokerProcess(
        data_dir,
        "authenticationEnabled=true",
        f"authenticationProviders={TOKEN_PROVIDER}",
        f"tokenSecretKey={data_url(KEY)}",
        "authorizationEnabled=true",
        "superUserRoles=admin",
        # the broker's own client is the super user: it creates public/default at first start
        "brokerClientAuthenticationPlugin=org.apache.pulsar.client.impl.auth.AuthenticationToken",
        f"brokerClientAuthenticationParameters=token:{hs256(KEY, 'admin')}",
    )


def _admin(proc: BrokerProcess) -> PulsarAdmin:
    return PulsarAdmin(
        f"http://127.0.0.1:{proc.web_port}",
        authentication=AuthenticationToken(hs256(KEY, "admin")),
    )


def _can_produce(proc: BrokerProcess, role: str, topic: str) -> bool:
    client = pulsar.Client(
        proc.url,
        authentication=pulsar.AuthenticationToken(hs256(KEY, role)),
        operation_timeout_seconds=5,
        logger=pulsar.ConsoleLogger(pulsar.LoggerLevel.Error),
    )
    try:
        producer = client.create_producer(topic, block_if_queue_full=True)
        producer.send(b"allowed")
        return True
    except pulsar.AuthorizationError:
        return False
    finally:
        client.close()


@pytest.mark.slow
def test_grants_and_revokes_survive_kill9(tmp_path: Path) -> None:
    topic = f"persistent://public/default/perm-{uuid.uuid4().hex[:8]}"
    proc = _broker(tmp_path / "data")
    proc.start()
    try:
        assert not _can_produce(proc, "kept", topic)
        admin = _admin(proc)
        admin.namespaces.grant_permission("public/default", "kept", ["produce"])
        admin.namespaces.grant_permission("public/default", "revoked", ["produce"])
        admin.namespaces.revoke_permission("public/default", "revoked")
        proc.kill()  # right after the answers: nothing flushed by a clean stop

        proc.start()
        assert _admin(proc).namespaces.permissions("public/default") == {"kept": ["produce"]}
        assert _can_produce(proc, "kept", topic)
        assert not _can_produce(proc, "revoked", topic)
    finally:
        proc.cleanup()
