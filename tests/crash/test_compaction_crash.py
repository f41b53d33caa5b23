"""kill -9 of a broker process in the middle of a compaction: after the restart the topic has
either its previous compacted view or the new one, whole, and the next compaction succeeds."""

from __future__ import annotations

import contextlib
import time
from pathlib import Path
from types import SimpleNamespace
from urllib.parse import quote

import pulsar
from admin_http import admin_json
from broker_process import BrokerProcess, process_client
from compaction_helpers import admin_path, compact, keyed_data, pairs, read_count, send_all

TOPIC = "persistent://public/default/compacted-crash"


def _web(proc: BrokerProcess) -> SimpleNamespace:
    return SimpleNamespace(web_service_url=f"http://127.0.0.1:{proc.web_port}")


def _produce(url: str, messages: list[tuple[str, bytes]]) -> None:
    client = process_client(url, operation_timeout_seconds=30)
    try:
        producer = client.create_producer(
            TOPIC,
            batching_enabled=True,
            batching_max_messages=200,
            batching_max_publish_delay_ms=5,
            block_if_queue_full=True,
        )
        send_all(producer, messages)
    finally:
        client.close()


def _compacted(url: str, expected: list[tuple[str, bytes]]) -> list[tuple[str, bytes]]:
    """The compacted read of the topic, as long as ``expected`` (and nothing follows)."""
    client = process_client(url, operation_timeout_seconds=30)
    try:
        reader = client.create_reader(TOPIC, pulsar.MessageId.earliest, is_read_compacted=True)
        return pairs(read_count(reader, len(expected)))
    finally:
        client.close()


def _compacted_ledger(proc: BrokerProcess) -> int:
    status, stats = admin_json(_web(proc), "GET", admin_path(TOPIC, "internalStats"))
    assert status == 200, stats
    return int(stats["compactedLedger"]["ledgerId"])


def _kill_while_writing(proc: BrokerProcess, directory: Path) -> bool:
    """Trigger a compaction and kill -9 the broker as soon as the new compacted ledger's file
    appears (the compaction is then writing it); False if it finished before that."""
    web = _web(proc)
    assert admin_json(web, "PUT", admin_path(TOPIC, "compaction"))[0] == 204
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        if len(list(directory.glob("*.compacted"))) >= 2:
            proc.kill()
            return True
        status = admin_json(web, "GET", admin_path(TOPIC, "compaction"))[1]
        if status["status"] != "RUNNING":
            assert status["status"] == "SUCCESS", status
            return False
        time.sleep(0.002)
    raise AssertionError("the compaction neither wrote its file nor finished")


def test_kill9_during_a_compaction_keeps_a_whole_view(tmp_path: Path) -> None:
    proc = BrokerProcess(tmp_path / "data")
    directory = tmp_path / "data" / "ledgers" / quote(TOPIC, safe="")
    try:
        proc.start()
        first, first_view = keyed_data(20_000, keys=300, deleted=30, seed=1)
        _produce(proc.url, first)
        compact(_web(proc), TOPIC)
        old_ledger = _compacted_ledger(proc)
        assert _compacted(proc.url, first_view) == first_view

        history = list(first)
        covered = len(first)  # the messages the previous view covers
        killed = False
        for attempt in range(4):  # more data each time, until the kill lands mid-compaction
            more, _ = keyed_data(150_000 * (attempt + 1), keys=300, deleted=0, seed=attempt + 2)
            _produce(proc.url, more)
            history += more
            killed = _kill_while_writing(proc, directory)
            if killed:
                break
            old_ledger, covered = _compacted_ledger(proc), len(history)  # it finished
        assert killed, "every compaction finished before it could be interrupted"

        proc.start()
        ledger = _compacted_ledger(proc)  # loads the topic: files that did not commit go
        assert [p.name for p in directory.glob("*.compacted")] == [f"{ledger}.compacted"]
        if ledger == old_ledger:  # the previous view, whole, then the log after its horizon
            expected = _view_of(history[:covered]) + history[covered:]
        else:
            expected = _view_of(history)
        assert _compacted(proc.url, expected) == expected

        compact(_web(proc), TOPIC)
        assert _compacted(proc.url, _view_of(history)) == _view_of(history)
        assert len(list(directory.glob("*.compacted"))) == 1
        proc.stop()
    finally:
        with contextlib.suppress(Exception):
            proc.cleanup()


def test_kill9_right_after_a_compaction_keeps_the_new_view(tmp_path: Path) -> None:
    """Killed once the compaction answered SUCCESS (its record is stored; the previous file
    may not be deleted yet): the new view is loaded and the previous file goes."""
    proc = BrokerProcess(tmp_path / "data")
    directory = tmp_path / "data" / "ledgers" / quote(TOPIC, safe="")
    try:
        proc.start()
        first, _ = keyed_data(5_000, keys=100, deleted=10, seed=5)
        _produce(proc.url, first)
        compact(_web(proc), TOPIC)
        old_ledger = _compacted_ledger(proc)
        more, _ = keyed_data(20_000, keys=100, deleted=5, seed=6)
        _produce(proc.url, more)
        compact(_web(proc), TOPIC)
        proc.kill()

        proc.start()
        ledger = _compacted_ledger(proc)
        assert ledger != old_ledger
        assert [p.name for p in directory.glob("*.compacted")] == [f"{ledger}.compacted"]
        assert _compacted(proc.url, _view_of(first + more)) == _view_of(first + more)
        proc.stop()
    finally:
        with contextlib.suppress(Exception):
            proc.cleanup()


def _view_of(messages: list[tuple[str, bytes]]) -> list[tuple[str, bytes]]:
    """The compacted view of ``messages``, in log order."""
    last = {key: i for i, (key, _) in enumerate(messages)}
    return [(k, v) for i, (k, v) in enumerate(messages) if last[k] == i and v]
