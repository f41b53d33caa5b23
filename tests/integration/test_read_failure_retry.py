"""A subscription whose reads fail for a while (here: the broker process has no file
descriptor left to open the ledger files with) retries them after
dispatcherReadFailureBackoff*, and delivers everything once reads work again; the failure is
logged once, not per retry."""

from __future__ import annotations

import os
import resource
from pathlib import Path

import pulsar
import pytest
from broker_process import BrokerProcess

TOPIC = "persistent://public/default/read-failure-retry"


def _lowest_free_fd(pid: int) -> int:
    """The descriptor number the process's next open would take."""
    used = {int(fd) for fd in os.listdir(f"/proc/{pid}/fd")}
    free = 0
    while free in used:
        free += 1
    return free


def test_failed_reads_are_retried_until_they_work(tmp_path: Path) -> None:
    broker = BrokerProcess(
        tmp_path / "data",
        "managedLedgerMaxEntriesPerLedger=1",  # every entry in its own (sealed) ledger file
        "managedLedgerMinLedgerRolloverTimeMinutes=0",
        "dispatcherReadFailureBackoffInitialTimeInMs=100",
        "dispatcherReadFailureBackoffMaxTimeInMs=200",
    )
    broker.start()
    try:
        client = pulsar.Client(broker.url, operation_timeout_seconds=10)
        client.subscribe(TOPIC, "s").close()
        producer = client.create_producer(TOPIC, batching_enabled=False)
        for i in range(5):
            producer.send(f"m{i}".encode())
        assert broker.proc is not None
        pid = broker.proc.pid
        limits = resource.prlimit(pid, resource.RLIMIT_NOFILE)
        consumer = None
        try:
            # the broker can open no descriptor any more: its ledger files cannot be read
            resource.prlimit(pid, resource.RLIMIT_NOFILE, (_lowest_free_fd(pid), limits[1]))
            consumer = client.subscribe(TOPIC, "s")  # over the open connection
            with pytest.raises(pulsar.Timeout):
                consumer.receive(timeout_millis=1500)
        finally:
            resource.prlimit(pid, resource.RLIMIT_NOFILE, limits)
        # nothing else triggers a dispatch now: the retries at the backoff deliver
        got = [consumer.receive(timeout_millis=5000).data() for _ in range(5)]
        assert got == [f"m{i}".encode() for i in range(5)]
        failures = [line for line in broker.log().splitlines() if "dispatch of" in line]
        assert len(failures) == 1, failures  # retried about ten times, logged once
        assert "retrying in" in failures[0]
        client.close()
    finally:
        broker.cleanup()
