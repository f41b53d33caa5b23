"""Pass-through options (``pulsar.client.*``, ``.reader.*``, ``.producer.*``, ``.admin.*``):
every keyword of the client's constructors is accepted or refused with its reason, values are
converted, and the converted settings are taken by the real client and broker (no Spark)."""

from __future__ import annotations

import asyncio
import inspect
import json
import urllib.request
from typing import Any

import pytest
from conftest import SparkBroker

from starquake.client import BatchingType, ProducerAccessMode
from starquake.client.asyncio import Client
from starquake.client.bulk import BulkReader
from starquake.spark._options import PulsarOptionError, read_options, write_options
from starquake.spark._passthrough import ADMIN, CLIENT, PRODUCER, READER
from starquake.spark._runtime import client_kwargs

_SET_ELSEWHERE = {"self", "service_url", "topic", "start_message_id", "queue_factory"}
_RUNTIME = {
    "io_threads",
    "message_listener_threads",
    "concurrent_lookup_requests",
    "log_conf_file_path",
    "stats_interval_in_seconds",
}


def _keywords(function: Any) -> set[str]:
    params = inspect.signature(function).parameters.values()
    return {p.name for p in params if p.kind is not p.VAR_KEYWORD} - _SET_ELSEWHERE


@pytest.mark.parametrize(
    ("table", "keywords", "java"),
    [
        (CLIENT, _keywords(Client.__init__) | _RUNTIME, "tlsTrustCertsFilePath"),
        (READER, _keywords(Client.create_reader), "receiverQueueSize"),
        (PRODUCER, _keywords(Client.create_producer), "batchingMaxMessages"),
    ],
)
def test_every_keyword_of_the_client_is_accepted_or_refused_with_a_reason(
    table: Any, keywords: set[str], java: str
) -> None:
    accepted = {keyword for _name, keyword, _conv in table.known.values()}
    refused = set(table.refused)
    assert keywords - accepted - refused == set()
    assert refused & accepted == set()
    # the names pulsar-spark users write (the Java client's) are there too
    assert table.known[java.lower()][0] == java


@pytest.mark.parametrize(
    ("option", "text", "expected"),
    [
        ("pulsar.client.operation_timeout_seconds", "7", {"operation_timeout_seconds": 7}),
        ("pulsar.client.operationTimeoutMs", "2500", {"operation_timeout_seconds": 3}),
        ("pulsar.client.connectionTimeoutMs", "900", {"connection_timeout_ms": 900}),
        ("pulsar.client.keepAliveIntervalSeconds", "5", {"keep_alive_interval_seconds": 5}),
        ("pulsar.client.listenerName", "internal", {"listener_name": "internal"}),
        (
            "pulsar.client.partitions_update_interval_seconds",
            "0.5",
            {"partitions_update_interval_seconds": 0.5},
        ),
        ("pulsar.client.numIoThreads", "4", {"io_threads": 4}),
        ("pulsar.client.numListenerThreads", "2", {"message_listener_threads": 2}),
        ("pulsar.client.concurrentLookupRequest", "9", {"concurrent_lookup_requests": 9}),
        ("pulsar.client.statsIntervalSeconds", "600", {"stats_interval_in_seconds": 600}),
        ("pulsar.client.log_conf_file_path", "/tmp/x", {"log_conf_file_path": "/tmp/x"}),
        ("pulsar.client.tlsHostnameVerificationEnable", "TRUE", {"tls_validate_hostname": True}),
    ],
)
def test_client_settings_are_converted(option: str, text: str, expected: dict[str, Any]) -> None:
    opts = read_options({"topic": "t", option.lower(): text}, streaming=False)
    assert opts.client_args == expected


def test_producer_settings_are_converted() -> None:
    texts = {
        "pulsar.producer.sendTimeoutMs": "1500",
        "pulsar.producer.compression_type": "ZSTD",
        "pulsar.producer.maxPendingMessages": "50",
        "pulsar.producer.maxPendingMessagesAcrossPartitions": "60",
        "pulsar.producer.batchingEnabled": "true",
        "pulsar.producer.batchingMaxMessages": "7",
        "pulsar.producer.batchingMaxBytes": "4096",
        "pulsar.producer.batchingMaxPublishDelayMicros": "2500",
        "pulsar.producer.chunkingEnabled": "false",
        "pulsar.producer.properties": '{"app": "spark"}',
        "pulsar.producer.batching_type": "KeyBased",
        "pulsar.producer.accessMode": "Shared",
    }
    opts = write_options({"topic": "t", **{k.lower(): v for k, v in texts.items()}})
    assert opts.producer_args == {
        "send_timeout_millis": 1500,
        "compression_type": "zstd",
        "max_pending_messages": 50,
        "max_pending_messages_across_partitions": 60,
        "batching_enabled": True,
        "batching_max_messages": 7,
        "batching_max_allowed_size_in_bytes": 4096,
        "batching_max_publish_delay_ms": 2.5,
        "chunking_enabled": False,
        "properties": {"app": "spark"},
        "batching_type": BatchingType.KeyBased,
        "access_mode": ProducerAccessMode.Shared,
    }
    pairs = write_options({"topic": "t", "pulsar.producer.properties": "a=1, b = 2"})
    assert pairs.producer_args == {"properties": {"a": "1", "b": "2"}}


def test_admin_settings_replace_the_clients_for_admin_calls() -> None:
    options = {
        "topic": "t",
        "pulsar.client.authpluginclassname": "token",
        "pulsar.client.authparams": "token:client",
        "pulsar.client.tlstrustcertsfilepath": "/c.pem",
        "pulsar.admin.authpluginclassname": "basic",
        "pulsar.admin.authparams": '{"userId": "u", "password": "p"}',
    }
    opts = read_options(options, streaming=False)
    assert opts.client_args["auth_params"] == "token:client"
    assert opts.admin_args == {
        "auth_plugin_class_name": "basic",
        "auth_params": '{"userId": "u", "password": "p"}',
        "tls_trust_certs_file_path": "/c.pem",
    }
    assert write_options({"topic": "t"}).admin_args == {}


@pytest.mark.parametrize(
    ("option", "text", "message"),
    [
        ("pulsar.client.operationTimeout", "5", "did you mean 'pulsar.client.operationTimeoutMs'"),
        ("pulsar.client.useTcpNoDelay", "true", "Java client setting that this client does not"),
        ("pulsar.client.serviceUrl", "pulsar://x:1", "use the option 'service.url'"),
        ("pulsar.client.logger", "x", "takes a Python object"),
        ("pulsar.client.connectionTimeoutMs", "soon", "'soon' is not an integer"),
        ("pulsar.client.connectionTimeoutMs", "0", "must be at least 1"),
        ("pulsar.client.useTls", "yes", "'yes' is not true or false"),
        ("pulsar.client.statsIntervalSeconds", "60", "only 600"),
        ("pulsar.reader.readCompacted", "true", "reads every message"),
        ("pulsar.reader.startMessageId", "x", "startingOffsets"),
        ("pulsar.reader.cryptoFailureAction", "SKIP", "is not one of FAIL, DISCARD, CONSUME"),
        ("pulsar.admin.serviceUrl", "http://x", "admin.url"),
        (
            "pulsar.admin.operationTimeoutMs",
            "5",
            "unknown option 'pulsar.admin.operationtimeoutms'",
        ),
    ],
)
def test_bad_read_pass_through_names_the_option(option: str, text: str, message: str) -> None:
    with pytest.raises(PulsarOptionError, match=message.replace("(", r"\(")):
        read_options({"topic": "t", option.lower(): text}, streaming=False)


@pytest.mark.parametrize(
    ("options", "message"),
    [
        ({"pulsar.producer.producername": "p"}, "set by the data source"),
        ({"pulsar.producer.block_if_queue_full": "false"}, "always true"),
        ({"pulsar.producer.hashingscheme": "JavaStringHash"}, "routes rows to partitions"),
        ({"pulsar.producer.encryptionkeys": "k"}, "encryptionKeys' .* encrypt together"),
        ({"pulsar.producer.publickeypath": __file__}, "encrypt together; give both"),
        ({"pulsar.producer.encryptionkeys": "a,b"}, "give one key name"),
        ({"pulsar.producer.cryptokeyreader": "x"}, "give publicKeyPath"),
        (
            {"pulsar.producer.encryptionkeys": "k", "pulsar.producer.publickeypath": "/no/such"},
            "'pulsar.producer.publicKeyPath': cannot read /no/such",
        ),
        ({"pulsar.producer.accessmode": "Lonely"}, "not one of Shared, Exclusive"),
        ({"pulsar.producer.properties": "[1]"}, "not name=value"),
        ({"pulsar.producer.batchingmaxpublishdelaymicros": "-1"}, "must be at least 0"),
        (
            {
                "pulsar.producer.batchingmaxmessages": "5",
                "pulsar.producer.batching_max_messages": "6",
            },
            "set the same thing",
        ),
        ({"pulsar.admin.authparams": "token:x"}, "needs 'pulsar.admin.authPluginClassName'"),
    ],
)
def test_bad_write_pass_through_names_the_option(options: dict[str, str], message: str) -> None:
    with pytest.raises(PulsarOptionError, match=message):
        write_options({"topic": "t", **options})


def test_converted_settings_are_taken_by_the_client_and_the_broker(
    spark_broker: SparkBroker, new_topic: str
) -> None:
    read = read_options(
        {
            "topic": new_topic,
            "pulsar.client.operationtimeoutms": "4000",
            "pulsar.client.numiothreads": "2",
            "pulsar.client.statsintervalseconds": "600",
            "pulsar.reader.subscriptionroleprefix": "etl",
            "pulsar.reader.readername": "spark-reader",
        },
        streaming=False,
    )
    write = write_options(
        {
            "topic": new_topic,
            "pulsar.producer.batchingmaxpublishdelaymicros": "1500",
            "pulsar.producer.batching_type": "KeyBased",
            "pulsar.producer.properties": "team=data",
            "pulsar.producer.maxpendingmessagesacrosspartitions": "100",
        }
    )

    async def run() -> dict[str, Any]:
        client = Client(spark_broker.url, **client_kwargs(read.client_args))
        try:
            producer = await client.create_producer(new_topic, **write.producer_args)
            await producer.send(b"x")
            reader = await BulkReader.create(
                client,
                new_topic,
                subscription_prefix=read.reader_args["subscription_role_prefix"],
                consumer_name=read.reader_args["reader_name"],
            )
            url = f"{spark_broker.admin_url}/admin/v2/{new_topic.replace('://', '/')}/stats"
            stats = await asyncio.to_thread(lambda: json.load(urllib.request.urlopen(url)))
            await reader.close()
            await producer.close()
            return dict(stats)
        finally:
            await client.close()

    stats = asyncio.run(run())
    (name,) = stats["subscriptions"]
    assert name.startswith("etl-")
    (consumer,) = stats["subscriptions"][name]["consumers"]
    assert consumer["consumerName"] == "spark-reader"
    assert len(stats["publishers"]) == 1


def test_tables_share_the_security_settings() -> None:
    admin = {keyword for _n, keyword, _c in ADMIN.known.values()}
    client = {keyword for _n, keyword, _c in CLIENT.known.values()}
    assert admin < client
    assert {"auth_plugin_class_name", "auth_params", "tls_trust_certs_file_path"} <= admin
