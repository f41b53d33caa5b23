"""``starquake admin topics truncate`` against a broker process, then kill -9: the truncated
data stays gone after the restart (even with infinite retention), every subscription stays at
the end, and what was published after the truncation survives."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

from broker_process import BrokerProcess, close_after_kill, process_client, read_all

TOPIC = "persistent://public/default/truncated"


def admin(proc: BrokerProcess, *args: str) -> Any:
    done = subprocess.run(
        [sys.executable, "-m", "starquake.cli.main", "admin", "--admin-url",
         proc.web_service_url, "--output", "json", *args],
        capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    assert done.returncode == 0, (args, done.stderr)
    return json.loads(done.stdout) if done.stdout.strip() else None


def backlogs(proc: BrokerProcess) -> dict[str, int]:
    stats = admin(proc, "topics", "stats", TOPIC)
    return {name: sub["msgBacklog"] for name, sub in stats["subscriptions"].items()}


def test_truncation_survives_kill9(tmp_path: Path) -> None:
    proc = BrokerProcess(tmp_path / "data")
    proc.start()
    try:
        admin(proc, "namespaces", "set-retention", "public/default", "--size", "-1", "--time", "-1")
        for sub in ("s", "t"):
            admin(proc, "topics", "create-subscription", TOPIC, "-s", sub, "-m", "earliest")
        client = process_client(proc.url)
        producer = client.create_producer(TOPIC, batching_enabled=False)
        for i in range(10):
            producer.send(f"old-{i}".encode())
        assert backlogs(proc) == {"s": 10, "t": 10}
        admin(proc, "topics", "truncate", TOPIC)
        assert backlogs(proc) == {"s": 0, "t": 0}
        new = [producer.send(f"new-{i}".encode()) for i in range(2)]
        proc.kill()
        close_after_kill(client)

        proc.start()
        assert backlogs(proc) == {"s": 2, "t": 2}
        assert admin(proc, "topics", "stats-internal", TOPIC)["numberOfEntries"] == 2
        stored = read_all(proc.url, TOPIC)
        assert [data for data, _ in stored] == [b"new-0", b"new-1"]
        assert [ids for _, ids in stored] == [(m.ledger_id(), m.entry_id()) for m in new]
        client = process_client(proc.url)
        consumer = client.subscribe(TOPIC, "s")
        assert consumer.receive(10_000).data() == b"new-0"
        client.close()
    finally:
        proc.cleanup()


def test_truncate_answers_pulsar_codes(tmp_path: Path) -> None:
    proc = BrokerProcess(tmp_path / "data")
    proc.start()
    try:
        missing = subprocess.run(
            [sys.executable, "-m", "starquake.cli.main", "admin", "--admin-url",
             proc.web_service_url, "topics", "truncate", "public/default/nothing-here"],
            capture_output=True, text=True, timeout=60,
        )  # fmt: skip
        assert missing.returncode == 1
        assert "(HTTP 404)" in missing.stderr
    finally:
        proc.cleanup()
