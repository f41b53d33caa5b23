"""What the broker keeps for a connection that never completes its handshake: thousands may be
open at once (idle, trickling, half frames), and every full garbage collection walks all their
objects while the event loop stands still. And the broker process's collector settings."""

from __future__ import annotations

import gc
import socket
import subprocess
import sys
from contextlib import ExitStack

from polling import wait_for
from raw_connection import RawConnection

from starquake.broker.embedded import EmbeddedBroker
from starquake.protocol import commands
from starquake.protocol._generated import starquake_wire_pb2 as pb

T = pb.BaseCommand
CONNECTIONS = 200


def test_a_connection_before_its_handshake_keeps_few_objects(broker: EmbeddedBroker) -> None:
    port = broker.server.broker_port
    service = broker.service
    open_before = len(service.connections)
    gc.collect()
    objects_before = len(gc.get_objects())
    with ExitStack() as stack:
        for _ in range(CONNECTIONS):
            stack.enter_context(socket.create_connection(("127.0.0.1", port), timeout=5))
        wait_for(
            lambda: len(service.connections) >= open_before + CONNECTIONS,
            "the broker to take every connection",
        )
        gc.collect()
        per_connection = (len(gc.get_objects()) - objects_before) / CONNECTIONS
    # the socket of this side counts too; the command handlers come with the handshake
    assert per_connection < 35, per_connection  # 25 here; 50 while each built its handler table


def test_commands_are_served_once_connected_and_refused_before(broker: EmbeddedBroker) -> None:
    port = broker.server.broker_port
    with RawConnection(port) as raw:
        raw.send(commands.ping())
        assert raw.closed()
    with RawConnection(port) as raw:
        raw.handshake()
        raw.send(commands.ping())
        assert raw.next().type == T.PONG
        raw.send(commands.connect("again"))
        assert raw.closed()


def test_a_broker_process_collects_rarely_and_skips_what_start_up_made() -> None:
    script = (
        "import gc\n"
        "from starquake.broker.server import GC_THRESHOLDS, tune_garbage_collector\n"
        "tune_garbage_collector()\n"
        "assert gc.get_threshold() == GC_THRESHOLDS, gc.get_threshold()\n"
        "assert GC_THRESHOLDS[0] >= 10_000, GC_THRESHOLDS\n"
        "assert gc.get_freeze_count() > 1000, gc.get_freeze_count()\n"
    )
    subprocess.run([sys.executable, "-c", script], check=True, timeout=60)


def test_accepted_connections_send_without_delay(broker: EmbeddedBroker) -> None:
    """The listener leaves TCP_NODELAY to the event loop's transport: it must be on."""
    service = broker.service
    with RawConnection(broker.server.broker_port) as raw:
        raw.handshake()
        cnx = next(c for c in list(service.connections) if c.connected)
        assert cnx.transport is not None
        sock = cnx.transport.get_extra_info("socket")
        assert sock.getsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY)
