"""Transactions with token authentication and authorization on, in a broker process: only the
owner of a transaction (the role that opened it) or a super user may add to it or end it, and
the owner is kept in the coordinator's log across a kill -9."""

from __future__ import annotations

import base64
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
from authz_setup import SECRET, SUPER_USER, TOKEN_PROVIDER, call, token
from broker_process import BrokerProcess
from raw_connection import T
from txn_helpers import received
from txn_raw import connected, end_txn_on_subscription, raw_producer, txn_send

from starquake import client as pulsar
from starquake.protocol import txn_commands
from starquake.protocol.errors import ServerError

OWNER, OTHER = "alice", "bob"
NAMESPACE = "acme/app"


@pytest.fixture
def secured(tmp_path: Path) -> Iterator[BrokerProcess]:
    proc = BrokerProcess(
        tmp_path / "data",
        "transactionCoordinatorEnabled=true",
        "authenticationEnabled=true",
        f"authenticationProviders={TOKEN_PROVIDER}",
        "tokenSecretKey=data:;base64," + base64.b64encode(SECRET).decode(),
        "authorizationEnabled=true",
        f"superUserRoles={SUPER_USER}",
    )
    proc.start()
    try:
        tenant = {"adminRoles": [], "allowedClusters": ["standalone"]}
        assert call(proc, "PUT", "/admin/v2/tenants/acme", SUPER_USER, tenant)[0] == 204
        assert call(proc, "PUT", f"/admin/v2/namespaces/{NAMESPACE}", SUPER_USER)[0] == 204
        for role in (OWNER, OTHER):
            grant = f"/admin/v2/namespaces/{NAMESPACE}/permissions/{role}"
            assert call(proc, "POST", grant, SUPER_USER, ["produce", "consume"])[0] == 204
            # As with Pulsar, a client finds the coordinators by a lookup of
            # pulsar/system/transaction_coordinator_assign: its role needs a grant there.
            grant = f"/admin/v2/namespaces/pulsar/system/permissions/{role}"
            assert call(proc, "POST", grant, SUPER_USER, ["consume"])[0] == 204
        yield proc
    finally:
        proc.cleanup()


def _client(proc: BrokerProcess, role: str) -> pulsar.Client:
    return pulsar.Client(
        proc.url,
        authentication=pulsar.AuthenticationToken(token(role)),
        enable_transaction=True,
        operation_timeout_seconds=10,
    )


def _refusal(role: str, txn: tuple[int, int]) -> tuple[int, str]:
    return (
        ServerError.TransactionNotFound,
        f"Client ({role}) is neither the owner of the transaction ({txn[0]},{txn[1]}) "
        "nor a super user",
    )


def _others_requests_are_refused(proc: BrokerProcess, txn: tuple[int, int], topic: str) -> None:
    """END_TXN, ADD_PARTITION_TO_TXN, ADD_SUBSCRIPTION_TO_TXN, END_TXN_ON_PARTITION and
    END_TXN_ON_SUBSCRIPTION from another role are refused; its own transactions go on."""
    most, least = txn
    with connected(proc.port, token(OTHER)) as cnx:
        cnx.send_command(txn_commands.end_txn(1, most, least, txn_commands.COMMIT))
        cnx.send_command(txn_commands.end_txn(2, most, least, txn_commands.ABORT))
        cnx.send_command(txn_commands.add_partition_to_txn(3, most, least, [topic]))
        cnx.send_command(txn_commands.add_subscription_to_txn(4, most, least, [(topic, "s")]))
        replies = [cnx.next() for _ in range(4)]
        ends = {r.end_txn_response.request_id: r.end_txn_response for r in replies[:2]}
        assert [(ends[n].error, ends[n].message) for n in (1, 2)] == [_refusal(OTHER, txn)] * 2
        added = [
            replies[2].add_partition_to_txn_response,
            replies[3].add_subscription_to_txn_response,
        ]
        assert [(a.error, a.message) for a in added] == [_refusal(OTHER, txn)] * 2
        # a coordinator's requests to a topic's broker: super users only
        cnx.send_command(txn_commands.end_txn_on_partition(5, most, least, topic, 0))
        on_partition = cnx.next().end_txn_on_partition_response
        tc_refusal = (
            f"TC client ({OTHER}) is not a super user, and is not allowed to operate on "
            f"transaction ({most},{least})"
        )
        assert (on_partition.error, on_partition.message) == (
            ServerError.TransactionNotFound,
            tc_refusal,
        )
        cnx.send_command(end_txn_on_subscription(6, txn, topic, "s", txn_commands.ABORT))
        on_subscription = cnx.next().end_txn_on_subscription_response
        assert (on_subscription.error, on_subscription.message) == (
            ServerError.TransactionNotFound,
            "Handle end txn on subscription failed: " + tc_refusal,
        )
        # the connection and the broker serve on: the other role's own transaction
        cnx.send_command(txn_commands.new_txn(7, 0, 60_000))
        own = cnx.next().new_txn_response
        assert not own.HasField("error")
        cnx.send_command(txn_commands.end_txn(8, 0, own.txnid_least_bits, txn_commands.COMMIT))
        assert not cnx.next().end_txn_response.HasField("error")


def test_only_the_owner_or_a_super_user_ends_a_transaction_even_after_kill9(
    secured: BrokerProcess,
) -> None:
    topic = f"persistent://{NAMESPACE}/txn-{uuid.uuid4().hex[:8]}"
    owner = _client(secured, OWNER)
    consumer = owner.subscribe(topic, "s", initial_position=pulsar.InitialPosition.Earliest)
    producer = owner.create_producer(topic)
    kept = owner.new_transaction(timeout_ms=120_000)
    producer.send(b"kept", txn=kept)
    dropped = owner.new_transaction(timeout_ms=120_000)
    producer.send(b"dropped", txn=dropped)
    _others_requests_are_refused(secured, kept.txn_id, topic)
    # Pulsar checks no owner on a send in a transaction: the producer's own grant covers it
    with connected(secured.port, token(OTHER)) as cnx:
        cnx.send_command(raw_producer(topic))
        assert cnx.next().type == T.PRODUCER_SUCCESS
        cnx.send(txn_send(1, 0, kept.txn_id, b"joined"))
        assert cnx.next().type == T.SEND_RECEIPT

    secured.kill()
    secured.start()  # the owners come back from the coordinator's log
    _others_requests_are_refused(secured, kept.txn_id, topic)
    status, meta = call(secured, "GET", _metadata_path(kept.txn_id), SUPER_USER)
    assert (status, meta["owner"], meta["status"]) == (200, OWNER, "OPEN")
    assert call(secured, "GET", _metadata_path(kept.txn_id), OTHER)[0] == 403
    # a super user may end anyone's transaction
    with connected(secured.port, token(SUPER_USER)) as cnx:
        most, least = dropped.txn_id
        cnx.send_command(txn_commands.end_txn(1, most, least, txn_commands.ABORT))
        assert not cnx.next().end_txn_response.HasField("error")

    try:
        kept.commit()  # by the owner's client, reconnected
        with pytest.raises(pulsar.TransactionNotFound):
            dropped.commit()
        assert sorted(received(consumer, 2)) == [b"joined", b"kept"]
    finally:
        owner.close()


def _metadata_path(txn: tuple[int, int]) -> str:
    return f"/admin/v3/transactions/transactionMetadata/{txn[0]}/{txn[1]}"
