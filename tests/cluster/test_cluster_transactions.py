"""Transactions are not there in cluster mode yet: a clustered broker with
transactionCoordinatorEnabled says so once and answers transaction commands NotAllowed."""

from __future__ import annotations

import uuid
from pathlib import Path

from broker_process import BrokerProcess
from raw_connection import RawConnection, T

from starquake.cluster.nodes import JetStreamNode
from starquake.protocol import txn_commands
from starquake.protocol.errors import ServerError


def test_cluster_mode_has_no_transactions_yet(
    tmp_path: Path, jetstream_node: JetStreamNode
) -> None:
    cluster = f"c{uuid.uuid4().hex[:6]}"
    broker = BrokerProcess(
        tmp_path / "b",
        f"metadataStoreUrl={jetstream_node.url}",
        f"clusterName={cluster}",
        "transactionCoordinatorEnabled=true",
    )
    broker.start()
    try:
        with RawConnection(broker.port) as cnx:
            cnx.handshake()
            cnx.send_command(txn_commands.new_txn(1, 0, 1000))
            reply = cnx.next()
            assert (reply.type, reply.error.error) == (T.ERROR, ServerError.NotAllowedError)
        assert "transactionCoordinatorEnabled has no effect in cluster mode yet" in broker.log()
    finally:
        broker.cleanup()
