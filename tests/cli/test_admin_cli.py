"""``starquake admin`` against a real broker: Pulsar's commands, the broker's JSON on stdout,
exit codes 0/1/2/3 and one-line errors.

The key paths run as real processes (``python -m starquake.cli.main``); the wider tour of topic
and subscription commands runs the same command tree in-process (click's runner), so that the
module spawns few processes. One broker serves the whole module.
"""

from __future__ import annotations

import contextlib
import json
import os
import socket
import subprocess
import sys
import uuid
from collections.abc import Iterator
from typing import Any

import click
import pulsar
import pytest
from click.testing import CliRunner, Result

from starquake.broker.embedded import EmbeddedBroker
from starquake.cli.main import cli


@pytest.fixture(scope="module")
def cli_broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[EmbeddedBroker]:
    with EmbeddedBroker(tmp_path_factory.mktemp("admin-cli") / "data") as running:
        yield running


def run(broker: EmbeddedBroker | None, *args: str) -> subprocess.CompletedProcess[str]:
    """``starquake admin ARGS`` as a process (stdout is a pipe, so the output is JSON)."""
    env = {**os.environ}
    if broker is not None:
        env["STARQUAKE_ADMIN_URL"] = broker.web_service_url
    return subprocess.run(
        [sys.executable, "-m", "starquake.cli.main", "admin", *args],
        capture_output=True,
        text=True,
        timeout=60,
        env=env,
    )


def admin(broker: EmbeddedBroker, *args: str) -> Result:
    """``starquake admin --admin-url URL ARGS`` in this process."""
    return CliRunner().invoke(cli, ["admin", "--admin-url", broker.web_service_url, *args])


def ok(broker: EmbeddedBroker, *args: str) -> Any:
    """Run ``admin ARGS``, expect success, return its JSON output (None if it printed none)."""
    result = admin(broker, *args)
    assert result.exit_code == 0, (args, result.output, result.stderr)
    return json.loads(result.stdout) if result.stdout.strip() else None


def test_tenants_and_namespaces_round_trip(cli_broker: EmbeddedBroker) -> None:
    tenant = f"t{uuid.uuid4().hex[:8]}"
    created = run(cli_broker, "tenants", "create", tenant, "-r", "ops,dev", "-c", "standalone")
    assert (created.returncode, created.stdout, created.stderr) == (0, "", "")
    got = run(cli_broker, "tenants", "get", tenant)
    assert json.loads(got.stdout) == {
        "adminRoles": ["ops", "dev"],
        "allowedClusters": ["standalone"],
    }
    assert tenant in json.loads(run(cli_broker, "tenants", "list").stdout)
    # the broker's body, exactly as it answered
    raw = run(cli_broker, "--output", "json", "clusters", "list")
    assert raw.stdout == '["standalone"]\n'

    # update keeps what it is not told to change
    ok(cli_broker, "tenants", "update", tenant, "--admin-roles", "admin")
    assert ok(cli_broker, "tenants", "get", tenant) == {
        "adminRoles": ["admin"],
        "allowedClusters": ["standalone"],
    }
    namespace = f"{tenant}/orders"
    ok(cli_broker, "namespaces", "create", namespace)
    assert ok(cli_broker, "namespaces", "list", tenant) == [namespace]
    assert isinstance(ok(cli_broker, "namespaces", "policies", namespace), dict)
    ok(cli_broker, "namespaces", "set-deduplication", namespace, "--enable")
    assert ok(cli_broker, "namespaces", "get-deduplication", namespace) is True
    ok(cli_broker, "namespaces", "set-deduplication", namespace, "--disable")
    assert ok(cli_broker, "namespaces", "get-deduplication", namespace) is False

    table = admin(cli_broker, "--output", "table", "namespaces", "list", tenant)
    assert table.exit_code == 0
    assert namespace in table.stdout and not table.stdout.lstrip().startswith("[")

    ok(cli_broker, "namespaces", "delete", namespace)
    assert ok(cli_broker, "namespaces", "list", tenant) == []
    deleted = run(cli_broker, "tenants", "delete", tenant)
    assert deleted.returncode == 0, deleted.stderr
    assert tenant not in ok(cli_broker, "tenants", "list")


def test_cluster_commands(cli_broker: EmbeddedBroker) -> None:
    name = f"c{uuid.uuid4().hex[:8]}"
    urls = ["--url", "http://elsewhere:8080", "--broker-url", "pulsar://elsewhere:6650"]
    ok(cli_broker, "clusters", "create", name, *urls)
    assert ok(cli_broker, "clusters", "get", name) == {
        "serviceUrl": "http://elsewhere:8080",
        "brokerServiceUrl": "pulsar://elsewhere:6650",
    }
    ok(cli_broker, "clusters", "update", name, "--broker-url-secure", "pulsar+ssl://elsewhere:6651")
    assert ok(cli_broker, "clusters", "get", name) == {
        "brokerServiceUrlTls": "pulsar+ssl://elsewhere:6651"
    }
    assert name in ok(cli_broker, "clusters", "list")
    again = admin(cli_broker, "clusters", "create", name, *urls)
    assert again.exit_code == 1 and "409" in again.stderr
    ok(cli_broker, "clusters", "delete", name)
    assert name not in ok(cli_broker, "clusters", "list")


def test_retention_and_message_ttl(cli_broker: EmbeddedBroker) -> None:
    namespace = f"public/ret-{uuid.uuid4().hex[:8]}"
    ok(cli_broker, "namespaces", "create", namespace)
    ok(cli_broker, "namespaces", "set-retention", namespace, "--size", "10M", "--time", "3h")
    assert ok(cli_broker, "namespaces", "get-retention", namespace) == {
        "retentionTimeInMinutes": 180,
        "retentionSizeInMB": 10,
    }
    ok(cli_broker, "namespaces", "set-message-ttl", namespace, "-ttl", "1h")
    assert ok(cli_broker, "namespaces", "get-message-ttl", namespace) == 3600
    ok(cli_broker, "namespaces", "set-message-ttl", namespace, "--messageTTL", "90")
    assert ok(cli_broker, "namespaces", "get-message-ttl", namespace) == 90


def _produce(broker: EmbeddedBroker, topic: str, payloads: list[bytes]) -> None:
    client = pulsar.Client(broker.service_url)
    try:
        producer = client.create_producer(topic)
        for payload in payloads:
            producer.send(payload, properties={"n": payload.decode()})
    finally:
        client.close()


def _backlog(broker: EmbeddedBroker, topic: str, sub: str) -> int:
    return int(ok(broker, "topics", "stats", topic)["subscriptions"][sub]["msgBacklog"])


def test_topic_stats_are_pulsar_topic_stats(cli_broker: EmbeddedBroker) -> None:
    short = f"stats-{uuid.uuid4().hex[:8]}"
    topic = f"persistent://public/default/{short}"
    ok(cli_broker, "topics", "create", short)
    ok(cli_broker, "topics", "create-subscription", short, "-s", "audit", "-m", "earliest")
    _produce(cli_broker, topic, [b"m0", b"m1", b"m2", b"m3", b"m4"])

    result = run(cli_broker, "topics", "stats", short)
    assert result.returncode == 0, result.stderr
    stats = json.loads(result.stdout)
    for field in ("msgRateIn", "msgRateOut", "msgThroughputIn", "storageSize", "publishers"):
        assert field in stats, field
    assert stats["msgInCounter"] == 5
    assert isinstance(stats["publishers"], list)
    assert stats["subscriptions"]["audit"]["msgBacklog"] == 5

    table = admin(cli_broker, "--output", "table", "topics", "stats", short)
    assert table.exit_code == 0, table.output
    assert "msgInCounter" in table.stdout and "audit" in table.stdout


def test_subscription_commands(cli_broker: EmbeddedBroker) -> None:
    short = f"subs-{uuid.uuid4().hex[:8]}"
    topic = f"persistent://public/default/{short}"
    ok(cli_broker, "topics", "create-subscription", topic, "-s", "s1", "-m", "earliest")
    _produce(cli_broker, topic, [b"a", b"b", b"c", b"d"])
    assert ok(cli_broker, "topics", "subscriptions", short) == ["s1"]

    peeked = admin(cli_broker, "topics", "peek-messages", short, "-s", "s1", "-n", "2")
    assert peeked.exit_code == 0, peeked.output
    lines = [json.loads(line) for line in peeked.stdout.splitlines()]
    assert [m["payload"] for m in lines] == ["a", "b"]
    assert lines[0]["properties"] == {"n": "a"}
    assert lines[0]["messageId"]

    ok(cli_broker, "topics", "skip", short, "-s", "s1", "-n", "1")
    assert _backlog(cli_broker, short, "s1") == 3
    ok(cli_broker, "topics", "clear-backlog", short, "-s", "s1")
    assert _backlog(cli_broker, short, "s1") == 0
    ok(cli_broker, "topics", "reset-cursor", short, "-s", "s1", "-t", "1h")
    assert _backlog(cli_broker, short, "s1") == 4
    ok(cli_broker, "topics", "reset-cursor", short, "-s", "s1", "-m", "latest")
    assert _backlog(cli_broker, short, "s1") == 0
    ok(cli_broker, "topics", "reset-cursor", short, "-s", "s1", "-m", "earliest")
    assert _backlog(cli_broker, short, "s1") == 4
    ok(cli_broker, "topics", "expire-messages", short, "-s", "s1", "-t", "0")
    assert _backlog(cli_broker, short, "s1") == 0

    last = ok(cli_broker, "topics", "last-message-id", short)
    assert last["entryId"] == 3
    internal = ok(cli_broker, "topics", "stats-internal", short)
    assert "ledgers" in internal and "s1" in internal["cursors"]

    ok(cli_broker, "topics", "unsubscribe", short, "-s", "s1")
    assert ok(cli_broker, "topics", "subscriptions", short) == []
    terminated = ok(cli_broker, "topics", "terminate", short)
    assert terminated["entryId"] == 3
    ok(cli_broker, "topics", "unload", short)
    ok(cli_broker, "topics", "delete", short)
    assert topic not in ok(cli_broker, "topics", "list", "public/default")


def test_partitioned_topic_commands(cli_broker: EmbeddedBroker) -> None:
    topic = f"public/default/parts-{uuid.uuid4().hex[:8]}"
    full = f"persistent://{topic}"
    ok(cli_broker, "topics", "create-partitioned-topic", topic, "-p", "2")
    assert ok(cli_broker, "topics", "get-partitioned-topic-metadata", topic) == {"partitions": 2}
    ok(cli_broker, "topics", "update-partitioned-topic", topic, "--partitions", "3")
    assert ok(cli_broker, "topics", "get-partitioned-topic-metadata", topic) == {"partitions": 3}
    assert full in ok(cli_broker, "topics", "list-partitioned-topics", "public/default")
    _produce(cli_broker, full, [b"x", b"y", b"z"])
    names = ok(cli_broker, "topics", "list", "public/default")
    assert f"{full}-partition-0" in names
    stats = ok(cli_broker, "topics", "partitioned-stats", topic)
    assert stats["msgInCounter"] == 3
    assert stats["metadata"] == {"partitions": 3}
    ok(cli_broker, "topics", "delete-partitioned-topic", topic)


def test_a_refused_request_exits_1_with_the_reason_and_status(cli_broker: EmbeddedBroker) -> None:
    result = run(cli_broker, "tenants", "get", "no-such-tenant")
    assert result.returncode == 1
    assert result.stdout == ""
    assert result.stderr.startswith("error: ")
    assert result.stderr.rstrip().endswith("(HTTP 404)")
    assert len(result.stderr.splitlines()) == 1


def test_usage_errors_exit_2(cli_broker: EmbeddedBroker) -> None:
    missing = admin(cli_broker, "topics", "skip", "t", "-s", "sub")  # no -n
    assert missing.exit_code == 2
    assert "--count" in missing.stderr
    bad_name = admin(cli_broker, "topics", "stats", "a/b")
    assert bad_name.exit_code == 2
    assert "invalid topic name" in bad_name.stderr
    both = admin(cli_broker, "namespaces", "set-deduplication", "public/default")
    assert both.exit_code == 2
    bad_output = run(cli_broker, "--output", "xml", "tenants", "list")
    assert bad_output.returncode == 2
    assert "Traceback" not in bad_output.stderr


@contextlib.contextmanager
def refused_port() -> Iterator[int]:
    """A port bound but not listening: connections to it are refused."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        yield int(s.getsockname()[1])


def test_cannot_connect_is_one_line_and_exit_3() -> None:
    with refused_port() as port:
        url = f"http://127.0.0.1:{port}"
        result = run(None, "--admin-url", url, "tenants", "list")
    assert result.returncode == 3
    assert result.stderr == f"error: cannot connect to {url}: Connection refused\n"
    assert result.stdout == ""


def test_admin_imports_neither_the_broker_nor_the_client() -> None:
    code = (
        "import sys\n"
        "from starquake.cli.main import main\n"
        "main(['admin', '--admin-url', 'http://127.0.0.1:9', 'clusters', 'list'])\n"
        "heavy = [m for m in sys.modules if m.startswith(('starquake.broker', 'starquake.client',"
        " 'pyspark', 'aiohttp', 'asyncio'))]\n"
        "print(heavy)\n"
    )
    result = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=60
    )
    assert result.stdout.strip() == "[]", result.stdout + result.stderr


def _all_commands(group: click.Group, prefix: list[str]) -> Iterator[list[str]]:
    ctx = click.Context(group)
    for name in group.list_commands(ctx):
        command = group.get_command(ctx, name)
        assert command is not None
        yield [*prefix, name]
        if isinstance(command, click.Group):
            yield from _all_commands(command, [*prefix, name])


def test_help_everywhere() -> None:
    runner = CliRunner()
    commands = [c for c in _all_commands(cli, []) if c[0] != "standalone"]
    assert ["admin", "topics", "reset-cursor"] in commands
    assert ["perf", "produce"] in commands and ["client", "consume"] in commands
    for command in [[], *commands]:
        result = runner.invoke(cli, [*command, "--help"])
        assert result.exit_code == 0, (command, result.output)
        assert "Usage:" in result.stdout
