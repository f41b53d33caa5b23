"""``starquake perf`` and ``starquake client`` take pulsar-perf's and pulsar-client's flags as
those tools spell them (``-ss``, ``-st``, ``-sp``, ``-db``, fractional ``-b``, ``-vs``, ``--hex``,
``--regex``, ...), through processes against a real broker; a flag they do not know is a usage
error, never a value or a topic name."""

from __future__ import annotations

import json
import subprocess
import sys
import urllib.request
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from hdrh.histogram import HdrHistogram
from hdrh.log import HistogramLogReader

from starquake.broker.embedded import EmbeddedBroker


@pytest.fixture(scope="module")
def cli_broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[EmbeddedBroker]:
    data = tmp_path_factory.mktemp("pulsar-flags") / "data"
    with EmbeddedBroker(data, maxMessageSize=64 * 1024) as running:
        yield running


def starquake(*args: str, timeout: float = 90) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "starquake.cli.main", *args],
        capture_output=True,
        text=True,
        timeout=timeout,
    )


def get_json(broker: EmbeddedBroker, path: str) -> Any:
    with urllib.request.urlopen(broker.web_service_url + path, timeout=30) as response:
        return json.loads(response.read())


def default_topics(broker: EmbeddedBroker) -> list[str]:
    return list(get_json(broker, "/admin/v2/persistent/public/default"))


def test_pulsar_perf_flags_run_as_pulsar_perf_reads_them(
    cli_broker: EmbeddedBroker, tmp_path: Path
) -> None:
    base = f"pf-{uuid.uuid4().hex[:8]}"
    url = cli_broker.service_url
    histogram = tmp_path / "produce.hgrm"
    produced = starquake(
        "perf", "produce", "-u", url, base, "-t", "2", "-r", "0", "-m", "300", "-s", "16",
        "-b", "0.5", "-bm", "50", "-bb", "65536", "--histogram-file", str(histogram),
        "-i", "0", "--json",
    )  # fmt: skip
    assert produced.returncode == 0, produced.stderr
    summary = json.loads(produced.stdout)
    assert summary["messages"] == 300 and summary["failed"] == 0
    assert summary["topics"] == [f"persistent://public/default/{base}-{i}" for i in (0, 1)]
    assert summary["batch_time_window_ms"] == 0.5
    latency = summary["latency_ms"]
    assert set(latency) == {"mean", "p50", "p95", "p99", "p99.9", "p99.99", "max"}
    assert latency["p99.9"] <= latency["p99.99"] <= latency["max"]
    # the HdrHistogram log holds every latency measured
    reader = HistogramLogReader(str(histogram), HdrHistogram(1, 600_000_000, 3))
    total = 0
    while (interval := reader.get_next_interval_histogram()) is not None:
        total += interval.get_total_count()
    reader.close()
    assert total == 300

    # pulsar-perf's consumer flags: the exact command of the report, with two topics
    consumed = starquake(
        "perf", "consume", "-u", url, base, "-t", "2", "-ss", "sub", "-ns", "2",
        "-st", "Shared", "-sp", "Earliest", "-n", "2", "-m", "600", "-time", "60",
        "-i", "0", "--json",
    )  # fmt: skip
    assert consumed.returncode == 0, consumed.stderr
    summary = json.loads(consumed.stdout)
    assert summary["messages"] == 600  # 300 messages, read by each of two subscriptions
    assert summary["subscriptions"] == ["sub-0", "sub-1"]
    assert summary["consumers"] == 8
    for i in (0, 1):
        stats = get_json(cli_broker, f"/admin/v2/persistent/public/default/{base}-{i}/stats")
        assert set(stats["subscriptions"]) == {"sub-0", "sub-1"}
        assert {s["type"] for s in stats["subscriptions"].values()} == {"Shared"}
        assert all(s["msgBacklog"] == 0 for s in stats["subscriptions"].values())
    # pulsar-perf read: -m is where readers start, -n how many messages in all
    read = starquake(
        "perf", "read", "-u", url, base, "-t", "2", "-m", "earliest", "-n", "300",
        "-r", "100000", "-time", "60", "-i", "0", "--json",
    )  # fmt: skip
    assert read.returncode == 0, read.stderr
    summary = json.loads(read.stdout)
    assert (summary["command"], summary["messages"]) == ("read", 300)
    assert summary["bytes"] == 300 * 16
    bad_start = starquake("perf", "read", "-u", url, base, "-m", "soon")
    assert bad_start.returncode == 2 and "--start-message-id" in bad_start.stderr

    topics = default_topics(cli_broker)
    for word in ("sub", "sub-x", "Shared", "Earliest", "t", "p"):
        assert f"persistent://public/default/{word}" not in topics


def test_unknown_flags_are_usage_errors_not_topics(cli_broker: EmbeddedBroker) -> None:
    url = cli_broker.service_url
    before = default_topics(cli_broker)
    cases = [
        ("perf", "consume", "-u", url, "x", "-ss", "sub", "-zz", "Shared"),
        ("perf", "consume", "-u", url, "x", "-sfoo"),  # no value glued to -s
        ("perf", "produce", "-u", url, "x", "-ioThreads", "2"),
        ("client", "--url", url, "consume", "x", "-s", "sub", "-mp"),
        ("client", "--url", url, "produce", "x", "-m", "a", "-kvk", "k"),
        ("admin", "--admin-url", cli_broker.web_service_url, "topics", "stats", "x", "-zz"),
    ]
    for args in cases:
        result = starquake(*args)
        assert result.returncode == 2, (args, result.stderr)
        assert "No such option" in result.stderr, result.stderr
    assert default_topics(cli_broker) == before
    # a choice pulsar-client has and Starquake does not offer is refused by name
    mode = starquake("client", "--url", url, "consume", "x", "-s", "s", "-m", "NonDurable")
    assert mode.returncode == 2 and "NonDurable" in mode.stderr


def test_pulsar_client_flags(cli_broker: EmbeddedBroker, tmp_path: Path) -> None:
    url = cli_broker.service_url
    topic = f"pc-{uuid.uuid4().hex[:8]}"
    # -m is split at the separator (comma by default), -vs declares the schema, -db: no batches
    produced = starquake(
        "client", "--url", url, "--output", "json", "produce", topic,
        "-m", "alpha,beta", "-m", "gamma", "-vs", "string", "-db", "-n", "2",
    )  # fmt: skip
    assert produced.returncode == 0, produced.stderr
    assert json.loads(produced.stdout)["produced"] == 6
    schema = get_json(cli_broker, f"/admin/v2/schemas/public/default/{topic}/schema")
    assert schema["type"] == "STRING"
    split = starquake(
        "client", "--url", url, "produce", topic, "-m", "x|y", "-s", "|", "-vs", "string"
    )
    assert split.returncode == 0, split.stderr
    assert json.loads(split.stdout)["produced"] == 2

    consumed = starquake(
        "client", "--url", url, "--output", "table", "consume", topic, "-s", "s1", "-st", "bytes",
        "-p", "Earliest", "-n", "8", "--hex", "-q", "10", "-r", "1000", "--timeout", "30",
    )  # fmt: skip
    assert consumed.returncode == 0, consumed.stderr
    assert consumed.stdout.count("----- got message -----") == 8
    assert "61 6c 70 68 61" in consumed.stdout and "|alpha|" in consumed.stdout  # hex dump

    # read: a reader from -m (nothing acknowledged, no subscription left behind)
    read = starquake(
        "client", "--url", url, "--output", "json", "read", topic, "-m", "earliest",
        "-n", "3", "--timeout", "30",
    )  # fmt: skip
    assert read.returncode == 0, read.stderr
    lines = [json.loads(line) for line in read.stdout.splitlines()]
    assert [m["payload"] for m in lines] == ["alpha", "beta", "gamma"]
    second = lines[1]["messageId"].rsplit(":", 2)[0]  # LEDGER:ENTRY
    inclusive = starquake(
        "client", "--url", url, "--output", "json", "read", topic, "-m", second, "-i",
        "--timeout", "30",
    )  # fmt: skip
    assert inclusive.returncode == 0, inclusive.stderr
    assert json.loads(inclusive.stdout)["payload"] == "beta"
    stats = get_json(cli_broker, f"/admin/v2/persistent/public/default/{topic}/stats")
    assert set(stats["subscriptions"]) == {"s1"}

    # -c: a message larger than the broker's maximum (64 KiB here) goes in chunks
    big = "z" * (150 * 1024)
    (tmp_path / "big").write_text(big)
    chunked = starquake(
        "client", "--url", url, "produce", topic + "-big", "-f", str(tmp_path / "big"), "-c"
    )
    assert chunked.returncode == 0, chunked.stderr
    whole = starquake(
        "client", "--url", url, "--output", "json", "consume", topic + "-big", "-s", "s",
        "-p", "Earliest", "--timeout", "30",
    )  # fmt: skip
    assert whole.returncode == 0, whole.stderr
    assert json.loads(whole.stdout)["payload"] == big


def test_client_consume_regex(cli_broker: EmbeddedBroker) -> None:
    url = cli_broker.service_url
    prefix = f"rx-{uuid.uuid4().hex[:6]}"
    for suffix in ("a", "b"):
        made = starquake("client", "--url", url, "produce", f"{prefix}-{suffix}", "-m", suffix)
        assert made.returncode == 0, made.stderr
    consumed = starquake(
        "client", "--url", url, "--output", "json", "consume",
        f"persistent://public/default/{prefix}-.*", "--regex", "-s", "s", "-p", "Earliest",
        "-n", "2", "--timeout", "30",
    )  # fmt: skip
    assert consumed.returncode == 0, consumed.stderr
    lines = [json.loads(line) for line in consumed.stdout.splitlines()]
    assert sorted(m["payload"] for m in lines) == ["a", "b"]
    assert {m["topic"] for m in lines} == {
        f"persistent://public/default/{prefix}-a",
        f"persistent://public/default/{prefix}-b",
    }
