"""Option parsing of the ``pulsar`` source, without Spark: every rule and its message."""

from __future__ import annotations

from pathlib import Path

import pytest

from starquake.client import ConsumerCryptoFailureAction, MessageId
from starquake.spark._options import PulsarOptionError, read_options, write_options

T = "persistent://public/default/t"


def test_defaults_of_a_batch_and_a_streaming_read() -> None:
    batch = read_options({"topic": "t"}, streaming=False)
    assert batch.topics == (T,)
    assert (batch.starting.kind, batch.ending.kind) == ("earliest", "latest")
    assert batch.fail_on_data_loss is True
    assert batch.service_url == "pulsar://localhost:6650"
    stream = read_options({"topics": "t, other,t"}, streaming=True)
    assert stream.topics == (T, "persistent://public/default/other")
    assert stream.starting.kind == "latest"


def test_offsets_json_forms() -> None:
    mid = MessageId(-1, 7, 3, 2)
    text = (
        '{"t-partition-0": [1, 2, 3], "t2": {"0": -2, "1": {"ledger": 4, "entry": 5}},'
        f' "t3": {list(mid.serialize())}, "t4": -1}}'
    )
    spec = read_options({"topic": "t", "startingOffsets": text}, streaming=True).starting
    assert spec.positions[T + "-partition-0"] == (1, 2, 3)
    assert spec.positions["persistent://public/default/t2-partition-0"] == (-1, -1, -1)
    assert spec.positions["persistent://public/default/t2-partition-1"] == (4, 5, 0)
    assert spec.positions["persistent://public/default/t3"] == (7, 3, 2)
    assert spec.default == "latest"


def test_pass_through_settings_are_converted() -> None:
    read = read_options(
        {
            "topic": "t",
            "pulsar.client.operationTimeoutMs".lower(): "2500",
            "pulsar.reader.receiverQueueSize".lower(): "77",
        },
        streaming=False,
    )
    assert read.client_args == {"operation_timeout_seconds": 3}
    assert read.reader_args == {"receiver_queue_size": 77}
    write = write_options(
        {
            "topic": "t",
            "pulsar.producer.batchingmaxpublishdelaymicros": "2000",
            "pulsar.producer.compressiontype": "LZ4",
            "pulsar.producer.batchingenabled": "false",
        }
    )
    assert write.producer_args == {
        "batching_max_publish_delay_ms": 2,
        "compression_type": "lz4",
        "batching_enabled": False,
    }
    assert write.admin_url is None  # never guessed


@pytest.mark.parametrize(
    ("options", "streaming", "message"),
    [
        ({"topic": "t", "startingoffsets": "latest"}, False, "not allowed in a batch read"),
        ({"topic": "t", "endingoffsets": "latest"}, True, "batch reads only"),
        ({"topic": "t", "endingoffsets": "earliest"}, False, "would read nothing"),
        ({"topic": "t", "startingoffsets": "earliest", "startingtime": "5"}, False, "exclude"),
        ({"topic": "t", "maxrecordspertrigger": "1", "maxoffsetspertrigger": "1"}, True, "alias"),
        ({"topic": "t", "startingtime": "soon"}, False, "not an integer"),
        ({"topic": "t", "service.url": "http://x:1"}, False, "service.url"),
        ({"topic": "t", "pulsar.producer.x": "1"}, False, "unknown option"),
        ({"topicspattern": "tenant/only"}, False, "topicsPattern"),
    ],
)
def test_bad_read_options(options: dict[str, str], streaming: bool, message: str) -> None:
    with pytest.raises(PulsarOptionError, match=message):
        read_options(options, streaming=streaming)


@pytest.mark.parametrize(
    ("options", "message"),
    [
        ({"topic": "t", "writeid": "has space"}, "writeId"),
        ({"topic": "t", "exactlyonce": "yes"}, "exactlyOnce"),
        ({"topic": "t", "admin.url": "ftp://x"}, "admin.url"),
        ({"topic": "t", "pulsar.producer.compressiontype": "brotli"}, "brotli"),
        ({"topic": "t", "startingoffsets": "earliest"}, "unknown option"),
    ],
)
def test_bad_write_options(options: dict[str, str], message: str) -> None:
    with pytest.raises(PulsarOptionError, match=message):
        write_options(options)


def test_encryption_options(tmp_path: Path) -> None:
    key = tmp_path / "reader.key.pem"
    key.write_text("-----BEGIN PRIVATE KEY-----\n")
    read = read_options(
        {
            "topic": "t",
            "pulsar.reader.defaultcryptokeyreader": f"file://{key}",
            "pulsar.reader.cryptofailureaction": "consume",
        },
        streaming=False,
    )
    assert read.reader_args == {
        "private_key_path": str(key),
        "crypto_failure_action": ConsumerCryptoFailureAction.CONSUME,
    }
    same = read_options({"topic": "t", "pulsar.reader.privatekeypath": str(key)}, streaming=True)
    assert same.reader_args == {"private_key_path": str(key)}
    for value, message in (
        (str(tmp_path / "missing.pem"), "cannot read"),
        ("data:application/x-pem-file;base64,AAAA", "not a file path"),
    ):
        with pytest.raises(PulsarOptionError, match=f"pulsar.reader.privateKeyPath.*{message}"):
            read_options({"topic": "t", "pulsar.reader.privatekeypath": value}, streaming=False)
    with pytest.raises(PulsarOptionError, match=r"cryptoFailureAction.*FAIL, DISCARD, CONSUME"):
        read_options({"topic": "t", "pulsar.reader.cryptofailureaction": "skip"}, streaming=False)


def test_kafka_position_and_limit_options() -> None:
    by_time = read_options(
        {
            "topic": "t",
            "startingoffsetsbytimestamp": '{"t": {"0": 5, "1": 6}, "u": 7}',
        },
        streaming=True,
    ).starting
    assert (by_time.kind, by_time.default, by_time.option) == (
        "times",
        "latest",
        "startingOffsetsByTimestamp",
    )
    assert by_time.times == {
        T + "-partition-0": 5,
        T + "-partition-1": 6,
        "persistent://public/default/u": 7,
    }
    alias = read_options({"topic": "t", "startingtimestamp": "99"}, streaming=False).starting
    assert (alias.kind, alias.time_ms, alias.option) == ("time", 99, "startingTimestamp")
    ending = read_options({"topic": "t", "endingtimestamp": "12"}, streaming=False).ending
    assert (ending.kind, ending.time_ms) == ("time", 12)
    limits = read_options(
        {
            "topic": "t",
            "maxoffsetspertrigger": "10",
            "minoffsetspertrigger": "4",
            "maxtriggerdelay": "90s",
            "maxbytespertrigger": "2048",
        },
        streaming=True,
    ).limits
    assert (limits.max_records, limits.min_records, limits.max_trigger_delay_ms) == (10, 4, 90_000)
    assert limits.max_bytes == 2048
    default = read_options({"topic": "t", "minoffsetspertrigger": "3"}, streaming=True).limits
    assert default.max_trigger_delay_ms == 15 * 60 * 1000  # Kafka's 15m
    assert read_options({"topic": "t", "includeheaders": "TRUE"}, streaming=False).include_headers


def test_starting_offsets_by_timestamp_strategy_defaults_to_each_connectors_behaviour() -> None:
    def strategy(**options: str) -> str:
        return read_options({"topic": "t", **options}, streaming=True).starting.strategy

    assert strategy(startingtimestamp="5") == "error"  # Kafka's names: Kafka's default
    assert strategy(startingoffsetsbytimestamp='{"t": 5}') == "error"
    assert strategy(startingtime="5") == "latest"  # pulsar-spark's name: it starts at the end
    assert strategy(startingtime="5", startingoffsetsbytimestampstrategy="Error") == "error"
    assert strategy(startingtimestamp="5", startingoffsetsbytimestampstrategy="latest") == "latest"
    # the ending times are not concerned
    ending = read_options({"topic": "t", "endingtimestamp": "12"}, streaming=False).ending
    assert ending.strategy == "latest"


@pytest.mark.parametrize(
    ("options", "streaming", "message"),
    [
        ({"startingoffsets": "earliest", "startingtimestamp": "5"}, True, "exclude each other"),
        (
            {"startingtimestamp": "5", "startingoffsetsbytimestamp": '{"t": 5}'},
            True,
            "'startingTimestamp' and 'startingOffsetsByTimestamp' exclude each other",
        ),
        ({"startingoffsetsbytimestamp": '{"t": {"0": -3}}'}, True, "not a time in ms"),
        ({"startingoffsetsbytimestamp": '{"t": {"x": 1}}'}, True, "partition 'x' of"),
        ({"startingoffsetsbytimestamp": "[]"}, True, "give a JSON object"),
        ({"endingoffsetsbytimestamp": '{"t": 5}'}, True, "'endingOffsetsByTimestamp' is for batch"),
        ({"startingtimestamp": "yesterday"}, False, "'startingTimestamp': 'yesterday' is not an"),
        (
            {"maxoffsetspertrigger": "5", "minoffsetspertrigger": "6"},
            True,
            r"'minOffsetsPerTrigger' \(6\) is higher than 'maxOffsetsPerTrigger' \(5\)",
        ),
        ({"maxtriggerdelay": "5s"}, True, "applies only with 'minOffsetsPerTrigger'"),
        (
            {"minoffsetspertrigger": "5", "maxtriggerdelay": "soon"},
            True,
            "'maxTriggerDelay': 'soon' is not a duration",
        ),
        ({"minoffsetspertrigger": "0"}, True, "'minOffsetsPerTrigger': must be at least 1"),
        ({"maxbytespertrigger": "0"}, True, "'maxBytesPerTrigger': must be at least 1"),
        ({"maxbytespertrigger": "100"}, False, "'maxBytesPerTrigger' is for streaming reads only"),
        ({"minoffsetspertrigger": "1"}, False, "'minOffsetsPerTrigger' is for streaming reads"),
        ({"includeheaders": "yes"}, False, "'includeHeaders': 'yes' is not true or false"),
        (
            {"startingtimestamp": "5", "startingoffsetsbytimestampstrategy": "earliest"},
            True,
            "'startingOffsetsByTimestampStrategy': 'earliest' is not 'error' or 'latest'",
        ),
        (
            {"startingoffsetsbytimestampstrategy": "latest"},
            False,
            "'startingOffsetsByTimestampStrategy' applies only with 'startingTimestamp'",
        ),
    ],
)
def test_bad_kafka_options(options: dict[str, str], streaming: bool, message: str) -> None:
    with pytest.raises(PulsarOptionError, match=message):
        read_options({"topic": "t", **options}, streaming=streaming)
