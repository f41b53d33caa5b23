"""``starquake cluster start`` as a user runs it: a JetStream node and two broker processes; the
official client given the printed multi-host service URL produces and consumes on topics spread
over both brokers; both list each other; SIGTERM stops everything. A broker whose
``metadataStoreUrl`` does not answer exits with one line naming it."""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import pulsar
from broker_process import BrokerProcess
from parent_watch import dies_with_parent


def _read_urls(proc: subprocess.Popen[str], timeout: float) -> tuple[str, list[str]]:
    """The service URL and the web URLs the launcher prints once every broker serves."""
    assert proc.stdout is not None
    deadline = time.monotonic() + timeout
    service, web = "", []
    while time.monotonic() < deadline and not web:
        line = proc.stdout.readline()
        if not line:
            break
        if line.startswith("service URL: "):
            service = line.split(": ", 1)[1].strip()
        elif line.startswith("web URLs: "):
            web = line.split(": ", 1)[1].split()
    assert service and web, f"the launcher printed no URLs (status {proc.poll()})"
    return service, web


def _children(pid: int) -> list[int]:
    found = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                fields = (entry / "stat").read_text().rsplit(")", 1)[1].split()
            except OSError:
                continue
            if int(fields[1]) == pid:
                found.append(int(entry.name))
    return found


def test_a_two_broker_cluster_serves_and_stops(tmp_path: Path) -> None:
    command = [sys.executable, "-m", "starquake.cli.main", "cluster", "start"]
    command += ["--data-dir", str(tmp_path), "--brokers", "2", "--log-level", "WARNING"]
    proc = subprocess.Popen(
        command, stdout=subprocess.PIPE, text=True, preexec_fn=dies_with_parent()
    )
    children: list[int] = []
    try:
        service_url, web_urls = _read_urls(proc, 120)
        children = _children(proc.pid)
        assert len(children) == 3  # the node and two brokers
        client = pulsar.Client(
            service_url,
            operation_timeout_seconds=30,
            logger=pulsar.ConsoleLogger(pulsar.LoggerLevel.Error),
        )
        try:
            for i in range(6):
                topic = f"persistent://public/default/started-{i}"
                consumer = client.subscribe(topic, "s")
                client.create_producer(topic).send(b"m%d" % i)
                assert consumer.receive(timeout_millis=30_000).data() == b"m%d" % i
        finally:
            client.close()
        ids = sorted(url.split("://", 1)[1] for url in web_urls)
        for url in web_urls:
            with urllib.request.urlopen(f"{url}/admin/v2/brokers/starquake", timeout=10) as r:
                assert sorted(json.load(r)) == ids
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(90) == 0
        for pid in children:
            assert not Path(f"/proc/{pid}").exists() or _zombie(pid), f"{pid} still runs"
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait(10)
        assert proc.stdout is not None
        proc.stdout.close()
        for pid in children:
            if Path(f"/proc/{pid}").exists():
                os.kill(pid, signal.SIGKILL)


def _zombie(pid: int) -> bool:
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] == "Z"
    except FileNotFoundError:
        return True


def test_a_broker_whose_metadata_store_does_not_answer_exits_naming_it(tmp_path: Path) -> None:
    broker = BrokerProcess(
        tmp_path / "data",
        "metadataStoreUrl=nats://127.0.0.1:1",
        "metadataStoreOperationTimeoutSeconds=2",
    )
    try:
        # its ports may be bound before it gives up on the store: then it exits
        with contextlib.suppress(RuntimeError):
            broker.start(timeout=60)
        assert broker.proc is not None and broker.proc.wait(60) != 0
        assert "metadataStoreUrl nats://127.0.0.1:1: " in broker.log()
    finally:
        broker.cleanup()
