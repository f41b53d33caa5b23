"""The transactions' admin endpoints, CLI and metrics, on a broker with transactions on (and
their 503 answers on one with them off)."""

from __future__ import annotations

import json
import time
from typing import Any

from admin_http import admin_json
from click.testing import CliRunner
from metrics_scrape import Scrape
from txn_helpers import new_topic, received

from starquake import client as pulsar
from starquake.broker.embedded import EmbeddedBroker
from starquake.cli.main import cli

V3 = "/admin/v3/transactions"


def _ok(broker: EmbeddedBroker, path: str) -> Any:
    status, body = admin_json(broker, "GET", path)
    assert status == 200, (path, body)
    return body


def _count(scrape: Scrape, name: str) -> float:
    return sum(s.value for s in scrape.samples.get(name, []) if s.labels["coordinator_id"] == "0")


def test_stats_of_an_open_transaction_then_of_its_commit(
    txn_broker: EmbeddedBroker, txn_client: pulsar.Client
) -> None:
    topic = new_topic()
    short = topic.removeprefix("persistent://")
    consumer = txn_client.subscribe(topic, "s")
    producer = txn_client.create_producer(topic)
    before = Scrape(txn_broker)
    producer.send(b"plain")
    txn = txn_client.new_transaction()
    most, least = txn.txn_id
    producer.send(b"in-txn", txn=txn)
    first = consumer.receive(5000)
    coordinators = _ok(txn_broker, f"{V3}/coordinators")
    assert coordinators["0"]["state"] == "Ready"
    assert coordinators["0"]["ongoingTxnSize"] >= 1
    assert coordinators["0"]["lowWaterMark"] < least
    assert _ok(txn_broker, f"/admin/v2/transactions/coordinators/{most}")["leastSigBits"] >= least
    meta = _ok(txn_broker, f"{V3}/transactionMetadata/{most}/{least}")
    assert meta["txnId"] == f"({most},{least})" and meta["status"] == "OPEN"
    assert meta["timeoutAt"] > meta["openTimestamp"] > 0
    assert meta["producedPartitions"][topic]["startPosition"] is not None
    buffer = _ok(txn_broker, f"{V3}/transactionBufferStats/{short}")
    assert buffer["state"] == "Ready" and buffer["ongoingTxnSize"] == 1
    assert buffer["maxReadPosition"] == meta["producedPartitions"][topic]["startPosition"]
    assert f"({most},{least})" in _ok(txn_broker, f"{V3}/slowTransactions/0")
    assert f"({most},{least})" not in _ok(txn_broker, f"{V3}/slowTransactions/600000")
    assert _ok(txn_broker, f"{V3}/pendingAckStats/{short}/s")["ongoingTxnSize"] == 0
    after_open = Scrape(txn_broker)
    assert (
        _count(after_open, "pulsar_txn_created_total")
        == _count(before, "pulsar_txn_created_total") + 1
    )
    assert _count(after_open, "pulsar_txn_active_count") >= 1
    txn.commit()
    assert first.data() == b"plain" and received(consumer, 1) == [b"in-txn"]
    status, body = admin_json(txn_broker, "GET", f"{V3}/transactionMetadata/{most}/{least}")
    assert status == 404 and "not found" in body["reason"]
    assert _ok(txn_broker, f"{V3}/transactionBufferStats/{short}")["ongoingTxnSize"] == 0
    after = Scrape(txn_broker)
    assert (
        _count(after, "pulsar_txn_committed_total")
        == _count(before, "pulsar_txn_committed_total") + 1
    )


def test_abort_counts_and_unknown_ids(
    txn_broker: EmbeddedBroker, txn_client: pulsar.Client
) -> None:
    before = _count(Scrape(txn_broker), "pulsar_txn_aborted_total")
    txn_client.new_transaction().abort()
    assert _count(Scrape(txn_broker), "pulsar_txn_aborted_total") == before + 1
    status, body = admin_json(txn_broker, "GET", f"{V3}/coordinators/7")
    assert status == 404 and "coordinatorId : 7" in body["reason"]
    status, body = admin_json(txn_broker, "GET", f"{V3}/transactionMetadata/0/999999")
    assert status == 404
    status, _ = admin_json(txn_broker, "GET", f"{V3}/pendingAckStats/public/default/nope-x/s")
    assert status == 404


def test_cli_shows_the_stats(txn_broker: EmbeddedBroker, txn_client: pulsar.Client) -> None:
    topic = new_topic()
    txn_client.create_producer(topic).send(b"x")
    txn = txn_client.new_transaction()
    most, least = txn.txn_id

    def run(*args: str) -> Any:
        base = ["admin", "--admin-url", txn_broker.web_service_url]
        result = CliRunner().invoke(cli, [*base, "--output", "json", "transactions", *args])
        assert result.exit_code == 0, result.output
        return json.loads(result.output)

    assert run("coordinator-stats")["0"]["state"] == "Ready"
    assert run("coordinator-stats", "-c", "0")["ongoingTxnSize"] >= 1
    assert run("transaction-metadata", "-m", str(most), "-l", str(least))["status"] == "OPEN"
    assert run("transaction-buffer-stats", "-t", topic)["ongoingTxnSize"] == 0
    time.sleep(0.01)
    assert f"({most},{least})" in run("slow-transactions", "-t", "0s")
    txn.abort()


def test_transactions_off_answers_503(broker: EmbeddedBroker) -> None:
    for path in ("coordinators", "coordinators/0", "transactionMetadata/0/0", "slowTransactions/1"):
        status, body = admin_json(broker, "GET", f"{V3}/{path}")
        assert status == 503, path
        assert "transactionCoordinatorEnabled=true" in body["reason"]
    assert "pulsar_txn_active_count" not in Scrape(broker).families
