"""``starquake client`` and ``starquake perf`` as processes against a real broker: produce then
consume gets exactly the messages sent, perf prints a parseable summary with the right count,
and a broker that is not there is one line on stderr with exit code 3."""

from __future__ import annotations

import json
import socket
import subprocess
import sys
import uuid
from collections.abc import Iterator

import pulsar
import pytest

from starquake.broker.embedded import EmbeddedBroker


@pytest.fixture(scope="module")
def cli_broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[EmbeddedBroker]:
    with EmbeddedBroker(tmp_path_factory.mktemp("client-cli") / "data") as running:
        yield running


def starquake(*args: str, timeout: float = 60) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "starquake.cli.main", *args],
        capture_output=True,
        text=True,
        timeout=timeout,
    )


def test_produce_then_consume_gets_exactly_the_messages(cli_broker: EmbeddedBroker) -> None:
    topic = f"cli-{uuid.uuid4().hex[:8]}"
    url = cli_broker.service_url
    produced = starquake(
        "client", "--url", url, "--output", "json", "produce", topic,
        "-m", "one", "-m", "two", "-m", "three", "-n", "2", "-k", "k1", "-p", "a=1,b=2",
    )  # fmt: skip
    assert produced.returncode == 0, produced.stderr
    summary = json.loads(produced.stdout)
    assert summary["topic"] == f"persistent://public/default/{topic}"
    assert summary["produced"] == 6

    consumed = starquake(
        "client", "--url", url, "consume", topic, "-s", "sub", "-p", "Earliest",
        "-n", "6", "--output", "json", "--timeout", "30",
    )  # fmt: skip
    assert consumed.returncode == 0, consumed.stderr
    messages = [json.loads(line) for line in consumed.stdout.splitlines()]
    assert [m["payload"] for m in messages] == ["one", "two", "three"] * 2
    assert {m["key"] for m in messages} == {"k1"}
    assert all(m["properties"] == {"a": "1", "b": "2"} for m in messages)
    assert len({m["messageId"] for m in messages}) == 6

    # the subscription has nothing more: every message was acknowledged, none is left
    more = starquake(
        "client", "--url", url, "consume", topic, "-s", "sub", "-n", "1", "--timeout", "1"
    )
    assert more.returncode == 1
    assert more.stdout == ""
    assert "no message for 1 s after 0 of 1" in more.stderr


def test_perf_produce_json_summary(cli_broker: EmbeddedBroker) -> None:
    topic = f"persistent://public/default/perf-{uuid.uuid4().hex[:8]}"
    result = starquake(
        "perf", "--url", cli_broker.service_url, "produce", topic,
        "-r", "0", "-m", "2000", "-s", "64", "--json",
    )  # fmt: skip
    assert result.returncode == 0, result.stderr
    summary = json.loads(result.stdout)
    assert summary["command"] == "produce"
    assert summary["messages"] == 2000
    assert summary["failed"] == 0
    assert summary["bytes"] == 2000 * 64
    assert summary["msgs_per_s"] > 0 and summary["mb_per_s"] > 0
    latency = summary["latency_ms"]
    assert set(latency) == {"mean", "p50", "p95", "p99", "p99.9", "p99.99", "max"}
    assert 0 < latency["p50"] <= latency["p95"] <= latency["p99"] <= latency["max"]

    client = pulsar.Client(cli_broker.service_url)
    try:
        reader = client.create_reader(topic, pulsar.MessageId.earliest)
        stored = 0
        while reader.has_message_available():
            assert len(reader.read_next(5000).data()) == 64
            stored += 1
    finally:
        client.close()
    assert stored == 2000

    consumed = starquake(
        "perf", "consume", "-u", cli_broker.service_url, topic,
        "-ss", "perf-sub", "-sp", "Earliest", "-m", "2000", "--json",
    )  # fmt: skip
    assert consumed.returncode == 0, consumed.stderr
    summary = json.loads(consumed.stdout)
    assert summary["command"] == "consume"
    assert summary["messages"] == 2000
    assert summary["bytes"] == 2000 * 64


def test_cannot_connect_exits_3_with_one_line() -> None:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))  # bound, not listening: connections are refused
        url = f"pulsar://127.0.0.1:{s.getsockname()[1]}"
        produce = starquake("client", "--url", url, "produce", "t", "-m", "x")
        perf = starquake("perf", "produce", "-u", url, "t", "-m", "1")
    for result in (produce, perf):
        assert result.returncode == 3
        assert result.stderr == f"error: cannot connect to {url}: Connection refused\n"
    unknown = starquake("client", "--url", "pulsar://no-such-host.invalid:6650", "produce", "t")
    assert unknown.returncode == 2  # no message given: a usage error comes first
    unknown = starquake(
        "client", "--url", "pulsar://no-such-host.invalid:6650", "produce", "t", "-m", "x"
    )
    assert unknown.returncode == 3
    assert unknown.stderr.startswith("error: cannot connect to pulsar://no-such-host.invalid")
    assert len(unknown.stderr.splitlines()) == 1
