"""Command builders shared by client and broker: each frame decodes back to the fields given."""

from __future__ import annotations

from starquake.common.schema_info import SchemaInfo, SchemaType
from starquake.protocol import client_commands as cc
from starquake.protocol import commands
from starquake.protocol.enums import (
    AckType,
    InitialPosition,
    KeySharedMode,
    ProducerAccessMode,
    SubType,
    TopicListMode,
)
from starquake.protocol.errors import ServerError
from starquake.protocol.framing import FrameDecoder, encode_command
from starquake.protocol.wire import pb

T = pb.BaseCommand


def decoded(command: pb.BaseCommand) -> pb.BaseCommand:
    """Frame ``command`` and decode it again, as a peer would."""
    return decoded_frame(encode_command(command))


def decoded_frame(frame: bytes) -> pb.BaseCommand:
    """Decode one whole frame with the incremental decoder, byte by byte."""
    decoder = FrameDecoder()
    frames = [f for byte in frame for f in decoder.feed(bytes([byte]))]
    assert len(frames) == 1
    assert decoder.buffered == 0
    return frames[0].command


def test_enums_match_the_generated_wire_values() -> None:
    assert {m.name: m.value for m in SubType} == dict(pb.CommandSubscribe.SubType.items())
    assert {m.name: m.value for m in InitialPosition} == dict(
        pb.CommandSubscribe.InitialPosition.items()
    )
    assert {m.name: m.value for m in AckType} == dict(pb.CommandAck.AckType.items())
    assert {m.name: m.value for m in ProducerAccessMode} == dict(pb.ProducerAccessMode.items())
    assert {m.name: m.value for m in KeySharedMode} == dict(pb.KeySharedMode.items())
    assert {m.name: m.value for m in TopicListMode} == dict(
        pb.CommandGetTopicsOfNamespace.Mode.items()
    )
    assert {m.name: m.value for m in ServerError} == dict(pb.ServerError.items())


def test_connect_announces_features() -> None:
    cmd = decoded(cc.connect("client-1", 19))
    assert cmd.type == T.CONNECT
    c = cmd.connect
    assert (c.client_version, c.protocol_version, c.auth_method_name) == ("client-1", 19, "none")
    assert c.feature_flags.supports_auth_refresh
    assert c.feature_flags.supports_broker_entry_metadata


def test_bare_connect_frame_has_no_feature_flags() -> None:
    cmd = decoded_frame(commands.connect("raw"))
    assert cmd.type == T.CONNECT
    assert cmd.connect.client_version == "raw"
    assert cmd.connect.protocol_version == commands.MAX_PROTOCOL_VERSION
    assert not cmd.connect.HasField("feature_flags")


def test_ping_pong_are_one_builder_for_both_sides() -> None:
    assert commands.ping() == encode_command(cc.ping())
    assert commands.pong() == encode_command(cc.pong())
    assert decoded(cc.ping()).HasField("ping")
    assert decoded(cc.pong()).HasField("pong")


def test_close_producer_and_consumer() -> None:
    cmd = decoded(cc.close_producer(3, 9))
    assert cmd.type == T.CLOSE_PRODUCER
    assert (cmd.close_producer.producer_id, cmd.close_producer.request_id) == (3, 9)
    assert commands.close_producer(3, 9) == encode_command(cc.close_producer(3, 9))
    cmd = decoded(cc.close_consumer(4, 10))
    assert cmd.type == T.CLOSE_CONSUMER
    assert (cmd.close_consumer.consumer_id, cmd.close_consumer.request_id) == (4, 10)
    assert commands.close_consumer(4, 10) == encode_command(cc.close_consumer(4, 10))


def test_partitioned_metadata_and_lookup() -> None:
    cmd = decoded(cc.partitioned_metadata("persistent://t/n/a", 5))
    assert cmd.type == T.PARTITIONED_METADATA
    assert (cmd.partition_metadata.topic, cmd.partition_metadata.request_id) == (
        "persistent://t/n/a",
        5,
    )
    cmd = decoded(cc.lookup("persistent://t/n/b", 6, True, "internal"))
    assert cmd.type == T.LOOKUP
    r = cmd.lookup_topic
    assert (r.topic, r.request_id, r.authoritative) == ("persistent://t/n/b", 6, True)
    assert r.advertised_listener_name == "internal"


def test_producer_with_everything() -> None:
    schema = SchemaInfo(SchemaType.JSON, b"{}", {"b": "2", "a": "1"}, "s")
    cmd = decoded(
        cc.producer(
            "persistent://t/n/p",
            7,
            8,
            producer_name="prod",
            user_provided_name=True,
            epoch=2,
            access_mode=ProducerAccessMode.WaitForExclusive,
            metadata={"k": "v"},
            topic_epoch=4,
            initial_subscription_name="init",
            schema=schema,
        )
    )
    assert cmd.type == T.PRODUCER
    p = cmd.producer
    assert (p.topic, p.producer_id, p.request_id) == ("persistent://t/n/p", 7, 8)
    assert (p.producer_name, p.user_provided_producer_name, p.epoch) == ("prod", True, 2)
    assert int(p.producer_access_mode) == ProducerAccessMode.WaitForExclusive
    assert (p.topic_epoch, p.initial_subscription_name, p.encrypted) == (4, "init", False)
    assert [(kv.key, kv.value) for kv in p.metadata] == [("k", "v")]
    assert (int(p.schema.type), p.schema.schema_data, p.schema.name) == (
        SchemaType.JSON,
        b"{}",
        "s",
    )
    assert [(kv.key, kv.value) for kv in p.schema.properties] == [("a", "1"), ("b", "2")]


def test_producer_leaves_optional_fields_out() -> None:
    cmd = decoded(
        cc.producer(
            "t",
            1,
            2,
            producer_name=None,
            user_provided_name=False,
            epoch=0,
            access_mode=ProducerAccessMode.Shared,
            metadata={},
            schema=SchemaInfo(SchemaType.BYTES),
        )
    )
    p = cmd.producer
    for absent in ("producer_name", "topic_epoch", "initial_subscription_name", "schema"):
        assert not p.HasField(absent), absent


def test_send_sets_highest_only_above_sequence_id() -> None:
    cmd = decoded(cc.send(1, 10, 3, 12, is_chunk=True))
    assert cmd.type == T.SEND
    s = cmd.send
    assert (s.producer_id, s.sequence_id, s.num_messages, s.highest_sequence_id) == (1, 10, 3, 12)
    assert s.is_chunk
    s = decoded(cc.send(1, 10, 1, 10)).send
    assert not s.HasField("highest_sequence_id")
    assert not s.HasField("is_chunk")


def test_send_frame_header_frames_the_shared_send() -> None:
    entry = b"entry-bytes"
    frames = FrameDecoder().feed(commands.send_frame_header(2, 5, len(entry), 2) + entry)
    (frame,) = frames
    assert frame.entry == entry
    s = frame.command.send
    assert (s.producer_id, s.sequence_id, s.num_messages) == (2, 5, 2)
    assert not s.HasField("highest_sequence_id")


def test_subscribe_with_everything() -> None:
    start = commands.message_id_data(3, 4)
    meta = pb.KeySharedMeta(keySharedMode=pb.STICKY)
    meta.hashRanges.add(start=0, end=99)
    cmd = decoded(
        cc.subscribe(
            "persistent://t/n/s",
            "sub",
            SubType.Key_Shared,
            11,
            12,
            consumer_name="c",
            durable=False,
            initial_position=InitialPosition.Earliest,
            read_compacted=True,
            metadata={"m": "1"},
            start_message_id=start,
            key_shared_meta=meta,
            replicate_subscription_state=True,
            schema=SchemaInfo(SchemaType.STRING),
        )
    )
    assert cmd.type == T.SUBSCRIBE
    s = cmd.subscribe
    assert (s.topic, s.subscription, int(s.subType)) == (
        "persistent://t/n/s",
        "sub",
        SubType.Key_Shared,
    )
    assert (s.consumer_id, s.request_id, s.consumer_name) == (11, 12, "c")
    assert (s.priority_level, s.durable, s.read_compacted) == (0, False, True)
    assert int(s.initialPosition) == InitialPosition.Earliest
    assert s.replicate_subscription_state
    assert (s.start_message_id.ledgerId, s.start_message_id.entryId) == (3, 4)
    assert int(s.keySharedMeta.keySharedMode) == KeySharedMode.STICKY
    assert [(r.start, r.end) for r in s.keySharedMeta.hashRanges] == [(0, 99)]
    assert int(s.schema.type) == SchemaType.STRING
    assert [(kv.key, kv.value) for kv in s.metadata] == [("m", "1")]


def test_subscribe_leaves_optional_fields_out() -> None:
    s = decoded(
        cc.subscribe(
            "t",
            "sub",
            SubType.Exclusive,
            1,
            2,
            consumer_name="c",
            durable=True,
            initial_position=InitialPosition.Latest,
            read_compacted=False,
            metadata={},
        )
    ).subscribe
    for absent in ("start_message_id", "keySharedMeta", "schema"):
        assert not s.HasField(absent), absent


def test_flow_ack_redeliver() -> None:
    cmd = decoded(cc.flow(5, 1000))
    assert cmd.type == T.FLOW
    assert (cmd.flow.consumer_id, cmd.flow.messagePermits) == (5, 1000)
    ids = [commands.message_id_data(1, 2), commands.message_id_data(1, 3)]
    cmd = decoded(cc.ack(5, AckType.Cumulative, ids))
    assert cmd.type == T.ACK
    assert (cmd.ack.consumer_id, int(cmd.ack.ack_type)) == (5, AckType.Cumulative)
    assert [(m.ledgerId, m.entryId) for m in cmd.ack.message_id] == [(1, 2), (1, 3)]
    cmd = decoded(cc.redeliver(5, ids))
    assert cmd.type == T.REDELIVER_UNACKNOWLEDGED_MESSAGES
    r = cmd.redeliver_unacknowledged_messages
    assert r.consumer_id == 5
    assert [(m.ledgerId, m.entryId) for m in r.message_ids] == [(1, 2), (1, 3)]
    assert not decoded(cc.redeliver(5)).redeliver_unacknowledged_messages.message_ids


def test_unsubscribe_and_last_message_id() -> None:
    cmd = decoded(cc.unsubscribe(6, 7))
    assert cmd.type == T.UNSUBSCRIBE
    assert (cmd.unsubscribe.consumer_id, cmd.unsubscribe.request_id) == (6, 7)
    cmd = decoded(cc.get_last_message_id(6, 8))
    assert cmd.type == T.GET_LAST_MESSAGE_ID
    assert (cmd.get_last_message_id.consumer_id, cmd.get_last_message_id.request_id) == (6, 8)


def test_seek_by_message_id_or_publish_time() -> None:
    s = decoded(cc.seek(1, 2, message_id=commands.message_id_data(7, 8))).seek
    assert (s.consumer_id, s.request_id) == (1, 2)
    assert (s.message_id.ledgerId, s.message_id.entryId) == (7, 8)
    assert not s.HasField("message_publish_time")
    s = decoded(cc.seek(1, 3, publish_time=1234)).seek
    assert s.message_publish_time == 1234
    assert not s.HasField("message_id")


def test_topics_of_namespace_and_schema() -> None:
    cmd = decoded(cc.get_topics_of_namespace("t/n", 4, TopicListMode.ALL))
    assert cmd.type == T.GET_TOPICS_OF_NAMESPACE
    g = cmd.get_topics_of_namespace
    assert (g.namespace, g.request_id, int(g.mode)) == ("t/n", 4, TopicListMode.ALL)
    cmd = decoded(cc.get_schema("persistent://t/n/x", 5, b"\x00\x01"))
    assert cmd.type == T.GET_SCHEMA
    assert (cmd.get_schema.topic, cmd.get_schema.request_id) == ("persistent://t/n/x", 5)
    assert cmd.get_schema.schema_version == b"\x00\x01"
    assert not decoded(cc.get_schema("x", 6, None)).get_schema.HasField("schema_version")
    assert not decoded(cc.get_schema("x", 6, b"")).get_schema.HasField("schema_version")
