"""The driver's commit of a transactional write (``exactlyOnceMode=transaction``), without
Spark: the task and commit functions the writers call, against a broker with transactions on
and deduplication off, with the driver "killed" between any two of its steps (the steps run
by hand up to there, then the micro-batch runs again as Spark runs it after a restart)."""

from __future__ import annotations

import collections
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest
from broker_process import BrokerProcess
from conftest import SparkBroker
from spark_helpers import read_topic

from starquake.client.asyncio import Client
from starquake.spark import _txn_log
from starquake.spark._options import write_options
from starquake.spark._runtime import Session
from starquake.spark._txn_log import log_topics, read_log, record
from starquake.spark._txn_sink import TxnCommitMessage, _end, commit_batch, write_task
from starquake.spark._write import _write_rows

PARTS = 3  # Spark partitions (tasks) of a micro-batch
ROWS = 40  # rows per task


def _opts(broker: SparkBroker, topic: str, **extra: str) -> Any:
    return write_options(
        {"service.url": broker.url, "topic": topic, "exactlyOnceMode": "transaction", **extra}
    )


def _task(opts: Any, write: str, batch: int, part: int) -> TxnCommitMessage:
    rows = pa.RecordBatch.from_pydict(
        {"value": [f"b{batch}-p{part}-{i}".encode() for i in range(ROWS)]}
    )

    async def write_rows(client: Client, batches: Any, name: str, txn: Any) -> int:
        sent, _ = await _write_rows(client, opts, None, batches, name, 0, txn=txn)
        return sent

    return write_task(opts, write, batch, part, iter([rows]), write_rows)


def _tasks(opts: Any, write: str, batch: int) -> list[TxnCommitMessage]:
    return [_task(opts, write, batch, p) for p in range(PARTS)]


def _counts(broker: SparkBroker, topic: str) -> collections.Counter[bytes]:
    return collections.Counter(m.data() for m in read_topic(broker, topic))


def _assert_once(broker: SparkBroker, topic: str, batches: int) -> None:
    counts = _counts(broker, topic)
    expected = {
        f"b{b}-p{p}-{i}".encode() for b in range(batches) for p in range(PARTS) for i in range(ROWS)
    }
    assert set(counts) == expected
    assert [v for v, n in counts.items() if n > 1] == []


def _driver_steps(
    opts: Any, write: str, batch: int, msgs: list[TxnCommitMessage], upto: str
) -> None:
    """The driver's commit of ``msgs`` run by hand up to ``upto`` (then "killed")."""
    log_topic = log_topics(opts.transaction_log_topic, write)[0]
    with Session(opts.service_url, {"enable_transaction": True}) as session:
        client = session.client
        if upto == "nothing":
            return
        intent = {"kind": "intent", "batch": batch, "txns": [m.ref.to_json() for m in msgs]}
        session.run(record(client, log_topic, intent))
        if upto == "intent":
            return
        for m in msgs[: 1 if upto == "one commit" else None]:
            assert session.run(_end(client, opts, m.ref.txn, commit=True))


@pytest.mark.parametrize("upto", ["nothing", "intent", "one commit", "all commits"])
def test_driver_killed_inside_its_commit_then_the_batch_run_again_stores_each_row_once(
    txn_broker: SparkBroker, new_topic: str, upto: str
) -> None:
    txn_broker.create_partitioned(new_topic, 2)
    opts = _opts(txn_broker, new_topic)
    write = "q-" + new_topic.rsplit("-", 1)[1]
    assert commit_batch(opts, write, 0, list(_tasks(opts, write, 0))) == PARTS
    _driver_steps(opts, write, 1, _tasks(opts, write, 1), upto)
    again = _tasks(opts, write, 1)  # Spark runs the micro-batch again after the restart
    committed = commit_batch(opts, write, 1, list(again))
    assert committed == (PARTS if upto == "nothing" else 0)  # else the earlier run's are
    _assert_once(txn_broker, new_topic, 2)
    with Session(opts.service_url, {}) as session:
        states = session.run(
            read_log(session.client, log_topics(opts.transaction_log_topic, write)[0])
        )
    assert states[1].done


def test_an_intent_whose_transactions_timed_out_is_written_again(
    txn_broker: SparkBroker, new_topic: str
) -> None:
    opts = _opts(txn_broker, new_topic, transactionTimeoutMs="1000")
    write = "q-timeout"
    old = _tasks(opts, write, 0)
    _driver_steps(opts, write, 0, old, "intent")
    for m in old:  # the coordinator aborts the old transactions: they are not known any more
        _wait_forgotten(txn_broker, m.ref.txn)
    assert commit_batch(opts, write, 0, list(_tasks(opts, write, 0))) == PARTS
    _assert_once(txn_broker, new_topic, 1)


def _wait_forgotten(broker: SparkBroker, txn: tuple[int, int]) -> None:
    """Wait until the coordinator no longer knows ``txn`` (timed out, aborted, ended)."""
    url = f"{broker.admin_url}/admin/v3/transactions/transactionMetadata/{txn[0]}/{txn[1]}"
    deadline = time.monotonic() + 30
    while True:
        try:
            urllib.request.urlopen(url, timeout=10).close()
        except urllib.error.HTTPError as exc:
            if exc.code == 404:
                return
            raise
        assert time.monotonic() < deadline, f"transaction {txn} still known after 30 s"
        time.sleep(0.1)


def test_attempts_that_lost_are_aborted_and_the_winners_committed(
    txn_broker: SparkBroker, new_topic: str
) -> None:
    opts = _opts(txn_broker, new_topic)
    write = "q-lost"
    first = _tasks(opts, write, 0)
    second = _tasks(opts, write, 0)  # retried / speculative attempts of every task
    winners = [first[0], second[1], second[2]]
    assert commit_batch(opts, write, 0, list(winners)) == PARTS
    _assert_once(txn_broker, new_topic, 1)
    losers = [second[0], first[1], first[2]]
    with Session(opts.service_url, {"enable_transaction": True}) as session:
        for m in losers:  # aborted by the commit: the coordinator knows them no more
            assert session.run(_end(session.client, opts, m.ref.txn, commit=True)) is None


def test_rows_of_an_open_transaction_are_not_read_until_the_commit(
    txn_broker: SparkBroker, new_topic: str
) -> None:
    opts = _opts(txn_broker, new_topic)
    msgs = _tasks(opts, "q-visible", 0)
    assert _counts(txn_broker, new_topic) == collections.Counter()
    commit_batch(opts, "q-visible", 0, list(msgs))
    _assert_once(txn_broker, new_topic, 1)


def test_a_broker_without_transactions_fails_the_write_naming_the_settings(
    spark_broker: SparkBroker, new_topic: str
) -> None:
    from starquake.spark._sink import PulsarSinkError
    from starquake.spark._txn_sink import check_transactions

    with pytest.raises(
        PulsarSinkError,
        match=r"exactlyOnceMode=transaction needs transactions on the broker.*"
        r"transactionCoordinatorEnabled=true.*exactlyOnceMode=deduplication",
    ):
        check_transactions(_opts(spark_broker, new_topic))


@pytest.fixture
def txn_process(tmp_path: Path) -> Iterator[BrokerProcess]:
    """A broker process with transactions on (and inactive topics kept), to kill."""
    proc = BrokerProcess(
        tmp_path / "data",
        "transactionCoordinatorEnabled=true",
        "brokerDeleteInactiveTopicsEnabled=false",
    )
    proc.start()
    yield proc
    proc.cleanup()


def test_a_broker_killed_before_the_commit_loses_and_duplicates_nothing(
    txn_process: BrokerProcess,
) -> None:
    proc = txn_process
    broker = SparkBroker(proc)
    topic = "persistent://public/default/txn-broker-kill"
    broker.create_partitioned(topic, 2)
    msgs = _tasks(_opts(broker, topic), "q-kill", 0)
    proc.kill()  # the transactions are recovered OPEN from the coordinator's log
    proc.start()
    opts = _opts(broker, topic)  # the same ports
    assert commit_batch(opts, "q-kill", 0, list(msgs)) == PARTS
    _assert_once(broker, topic, 1)


def test_options_of_the_transaction_mode_are_checked() -> None:
    from starquake.spark._options import PulsarOptionError

    base = {"topic": "t", "exactlyOnceMode": "transaction"}
    opts = write_options(base)
    assert (opts.transactional, opts.exactly_once) == (True, False)
    assert opts.transaction_log_topic == "persistent://public/default/t-spark-txn"
    assert opts.transaction_timeout_ms == 300_000
    with pytest.raises(PulsarOptionError, match="'exactlyOnceMode': 'atomic' is not"):
        write_options({**base, "exactlyOnceMode": "atomic"})
    with pytest.raises(PulsarOptionError, match="does not go with exactlyOnce=false"):
        write_options({**base, "exactlyOnce": "false"})
    with pytest.raises(PulsarOptionError, match="'transactionTimeoutMs': must be at least 1000"):
        write_options({**base, "transactionTimeoutMs": "10"})
    with pytest.raises(PulsarOptionError, match="option 'transactionLogTopic' is needed"):
        write_options({"exactlyOnceMode": "transaction"})
    assert not write_options({"topic": "t"}).transactional


def test_a_task_whose_producer_reconnected_writes_its_rows_again_in_a_new_transaction(
    txn_process: BrokerProcess,
) -> None:
    proc = txn_process
    broker = SparkBroker(proc)
    topic = "persistent://public/default/txn-resent"
    opts = _opts(broker, topic)
    attempts: list[str] = []

    async def write_rows(client: Client, batches: Any, name: str, txn: Any) -> int:
        attempts.append(name)

        def rows() -> Any:
            for i, batch in enumerate(batches):
                if i == 1 and len(attempts) == 1:  # the first attempt, between its batches
                    proc.kill()
                    proc.start()
                yield batch

        sent, _ = await _write_rows(client, opts, None, rows(), name, 0, txn=txn)
        return sent

    halves = [
        pa.RecordBatch.from_pydict({"value": [f"h{h}-{i}".encode() for i in range(30)]})
        for h in range(2)
    ]
    message = write_task(opts, "q-resent", 0, 0, iter(halves), write_rows)
    assert len(attempts) == 2  # the producer reconnected: the transaction was aborted
    assert message.rows == 60
    assert commit_batch(opts, "q-resent", 0, [message]) == 1
    counts = _counts(broker, topic)
    assert sorted(counts) == sorted(f"h{h}-{i}".encode() for h in range(2) for i in range(30))
    assert max(counts.values()) == 1


def test_the_log_is_read_incrementally_and_equals_a_whole_read(
    txn_broker: SparkBroker, new_topic: str
) -> None:
    """A process reads each log once: later reads take only the records appended since, and
    give what reading the whole log gives (less the micro-batches it was told to forget,
    until new records name them again)."""
    topic = new_topic + "-log"

    def ref(n: int) -> dict[str, Any]:
        return {"txn": [0, n], "partition": n % 2, "marker": ""}

    def opened(batch: int, n: int) -> dict[str, Any]:
        return {"kind": "open", "batch": batch, **ref(n)}

    with Session(txn_broker.url, {}) as session:
        client = session.client

        def whole() -> dict[int, Any]:
            _txn_log._SEEN.pop(topic, None)
            return session.run(read_log(client, topic))

        for n in range(3):
            session.run(record(client, topic, opened(0, n)))
        first = session.run(read_log(client, topic))
        assert set(first) == {0} and len(first[0].opened) == 3
        session.run(record(client, topic, {"kind": "intent", "batch": 0, "txns": [ref(1)]}))
        session.run(record(client, topic, {"kind": "done", "batch": 0}))
        session.run(record(client, topic, opened(1, 7)))
        again = session.run(read_log(client, topic))
        assert again[0].done and list(again[0].decided) == [(0, 1)]
        assert list(again[1].opened) == [(0, 7)]
        assert again == whole()
        _txn_log.forget_batches(topic, 1)
        assert set(session.run(read_log(client, topic))) == {1}
        session.run(record(client, topic, opened(0, 9)))  # a late attempt of batch 0
        late = session.run(read_log(client, topic))
        assert list(late[0].opened) == [(0, 9)] and not late[0].done
