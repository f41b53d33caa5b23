"""Broker configuration: broker.conf files, STARQUAKE_<key> variables, -D overrides."""

from __future__ import annotations

from pathlib import Path

import pytest

from starquake.broker.config import BrokerConfig, ConfigError, load_config, parse_overrides


def test_defaults_are_pulsars() -> None:
    config = BrokerConfig()
    assert config.brokerServicePort == 6650
    assert config.webServicePort == 8080
    assert config.maxMessageSize == 5242880
    assert config.managedLedgerMaxEntriesPerLedger == 50000
    assert config.allowAutoTopicCreationType == "non-partitioned"


def test_precedence_file_env_overrides(tmp_path: Path) -> None:
    conf = tmp_path / "broker.conf"
    conf.write_text(
        "# a comment\n\nbrokerServicePort=7000\nwebServicePort = 7001\n"
        "maxMessageSize=1000\nsomeJavaOnlyKey=whatever\n"
    )
    env = {"STARQUAKE_webServicePort": "7101", "STARQUAKE_maxMessageSize": "2000", "OTHER": "x"}
    config = load_config(conf, {"maxMessageSize": "3000"}, env)
    assert config.brokerServicePort == 7000
    assert config.webServicePort == 7101
    assert config.maxMessageSize == 3000
    assert config.extra == {"someJavaOnlyKey": "whatever"}


def test_types_are_converted() -> None:
    config = load_config(
        overrides={
            "allowAutoTopicCreation": "false",
            "managedLedgerMinLedgerRolloverTimeMinutes": "0.5",
        },
        environ={},
    )
    assert config.allowAutoTopicCreation is False
    assert config.managedLedgerMinLedgerRolloverTimeMinutes == 0.5


@pytest.mark.parametrize(
    ("overrides", "message"),
    [
        ({"noSuchKey": "1"}, "unknown configuration key"),
        ({"brokerServicePort": "http"}, "not a valid int"),
        ({"allowAutoTopicCreation": "maybe"}, "not a valid bool"),
        ({"webServicePort": "65536"}, "webServicePort: 65536 is out of range"),
        ({"brokerServicePort": "-2"}, "brokerServicePort: -2 is out of range"),
        ({"managedLedgerCacheSizeMB": "-5"}, "managedLedgerCacheSizeMB: -5 is out of range"),
        ({"defaultNumPartitions": "0"}, "must be from 1 to 10000"),
        ({"defaultNumPartitions": "10001"}, "must be from 1 to 10000"),
        ({"maxNumPartitionsPerPartitionedTopic": "10001"}, "must be from 0 to 10000"),
        ({"maxMessageSize": "0"}, "maxMessageSize: 0 is out of range"),
        ({"allowAutoTopicCreationType": "sharded"}, "not one of non-partitioned, partitioned"),
    ],
)
def test_bad_values_are_clear_errors(overrides: dict[str, str], message: str) -> None:
    with pytest.raises(ConfigError, match=message):
        load_config(overrides=overrides, environ={})


def test_bad_file_line(tmp_path: Path) -> None:
    conf = tmp_path / "broker.conf"
    conf.write_text("justakey\n")
    with pytest.raises(ConfigError, match=r"broker\.conf:1"):
        load_config(conf, environ={})


def test_define_parsing() -> None:
    assert parse_overrides(["a=1", "b = x=y"]) == {"a": "1", "b": "x=y"}
    with pytest.raises(ConfigError):
        parse_overrides(["novalue"])


def test_an_empty_port_turns_it_off_as_in_pulsar(tmp_path: Path) -> None:
    conf = tmp_path / "broker.conf"
    conf.write_text("brokerServicePort=\nbrokerServicePortTls=6651\nwebServicePortTls=\n")
    config = load_config(conf, environ={})
    assert config.brokerServicePort == -1
    assert config.brokerServicePortTls == 6651
    assert config.webServicePortTls == -1
    assert config.webServicePort == 8080


@pytest.mark.parametrize(
    ("url", "servers"),
    [
        ("", []),
        ("nats://h1:4222", ["nats://h1:4222"]),
        ("nats://h1:4222, h2:4223", ["nats://h1:4222", "nats://h2:4223"]),
    ],
)
def test_configuration_store_url_names_nats_servers(url: str, servers: list[str]) -> None:
    config = load_config(overrides={"configurationMetadataStoreUrl": url}, environ={})
    assert config.configuration_store_servers == servers


@pytest.mark.parametrize("url", ["zk:localhost:2181", "nats://", "http://h:1", "nats://h:1/x"])
def test_another_configuration_store_url_is_refused_naming_the_key(url: str) -> None:
    with pytest.raises(ConfigError, match="configurationMetadataStoreUrl"):
        load_config(overrides={"configurationMetadataStoreUrl": url}, environ={})
