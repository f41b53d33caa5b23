"""``starquake client consume`` and ``starquake client read``, as pulsar-client: receive and
print messages, with a subscription (acknowledged) or with a reader (nothing acknowledged)."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, TypeVar

import click

from starquake.cli.client_commands import (
    OUTPUT_OPTION,
    ClientContext,
    consumer_type_of,
    message_json,
    open_client,
    subscription_options,
)
from starquake.cli.output import CommandError, hex_dump, print_json_line
from starquake.cli.params import check_topic, count_option
from starquake.cli.params import start_message_id as reader_start
from starquake.cli.strict_options import StrictCommand

if TYPE_CHECKING:
    from starquake.client import Consumer, Message, Reader

F = TypeVar("F", bound=Callable[..., Any])


def _receive_options(command: F) -> F:
    """The options ``consume`` and ``read`` share (pulsar-client's names)."""
    options = [
        click.option("--hex", "as_hex", is_flag=True, help="show the content as a hex dump"),
        click.option("--hide-content", is_flag=True, help="do not print the messages' content"),
        click.option(
            "-r",
            "--rate",
            type=click.FloatRange(min=0),
            default=0,
            help="messages per second (0: as fast as possible)",
        ),
        click.option(
            "-q",
            "--queue-size",
            type=click.IntRange(min=1),
            default=None,
            help="the receiver queue size (default: the client's, 1000)",
        ),
        click.option(
            "-st",
            "--schema-type",
            type=click.Choice(("bytes",), case_sensitive=False),
            default="bytes",
            show_default=True,
            help="the schema messages are read with",
        ),
        click.option(
            "--timeout",
            type=click.FloatRange(min=0),
            default=0,
            help="give up after this many seconds without a message (0: wait forever)",
        ),
        OUTPUT_OPTION,
    ]
    for option in reversed(options):
        command = option(command)
    return command


@click.command("consume", cls=StrictCommand)
@click.argument("topic")
@click.option("-s", "--subscription-name", required=True, help="subscription name")
@subscription_options()
@click.option(
    "-m",
    "--subscription-mode",
    type=click.Choice(("Durable",), case_sensitive=False),
    default="Durable",
    show_default=True,
    help="only Durable subscriptions are offered here",
)
@count_option(
    "-n",
    "--num-messages",
    default=1,
    minimum=0,
    help="messages to consume (0: until interrupted)",
)
@click.option("--regex", is_flag=True, help="TOPIC is a regular expression of topic names")
@_receive_options
@click.pass_obj
def consume(
    ctx: ClientContext,
    topic: str,
    subscription_name: str,
    subscription_type: str,
    subscription_position: str,
    subscription_mode: str,
    num_messages: int,
    as_hex: bool,
    hide_content: bool,
    rate: float,
    regex: bool,
    queue_size: int | None,
    schema_type: str,
    timeout: float,
    output: str | None,
) -> None:
    """Receive, print and acknowledge messages of TOPIC (of every topic matching it with
    --regex)."""
    if regex:
        _check_pattern(topic)
        name = topic
    else:
        name = check_topic(topic)
    show = _Shown(ctx.json(output), hide_content, as_hex)
    from starquake.client import InitialPosition

    settings: dict[str, Any] = {
        "consumer_type": consumer_type_of(subscription_type),
        "initial_position": getattr(InitialPosition, subscription_position.capitalize()),
        "is_pattern_topic": regex,
    }
    if queue_size is not None:
        settings["receiver_queue_size"] = queue_size
    with open_client(ctx.url, **ctx.client_args) as c:
        consumer = c.subscribe(name, subscription_name, **settings)
        received = _receive_loop(consumer, num_messages, timeout, rate, show)
        consumer.close()
    if not show.as_json:
        click.echo(f"{received} messages successfully consumed", err=True)


@click.command("read", cls=StrictCommand)
@click.argument("topic")
@click.option(
    "-m",
    "--start-message-id",
    default="latest",
    show_default=True,
    help="where the reader starts: latest, earliest or LEDGER:ENTRY",
)
@click.option(
    "-i",
    "--start-message-id-inclusive",
    is_flag=True,
    help="include the message at --start-message-id",
)
@count_option(
    "-n",
    "--num-messages",
    default=1,
    minimum=0,
    help="messages to read (0: until interrupted)",
)
@_receive_options
@click.pass_obj
def read(
    ctx: ClientContext,
    topic: str,
    start_message_id: str,
    start_message_id_inclusive: bool,
    num_messages: int,
    as_hex: bool,
    hide_content: bool,
    rate: float,
    queue_size: int | None,
    schema_type: str,
    timeout: float,
    output: str | None,
) -> None:
    """Read and print messages of TOPIC with a reader (nothing is acknowledged)."""
    name = check_topic(topic)
    start = reader_start(start_message_id)
    show = _Shown(ctx.json(output), hide_content, as_hex)
    settings: dict[str, Any] = {"start_message_id_inclusive": start_message_id_inclusive}
    if queue_size is not None:
        settings["receiver_queue_size"] = queue_size
    with open_client(ctx.url, **ctx.client_args) as c:
        reader = c.create_reader(name, start, **settings)
        received = _receive_loop(reader, num_messages, timeout, rate, show)
        reader.close()
    if not show.as_json:
        click.echo(f"{received} messages successfully read", err=True)


def _check_pattern(topic: str) -> None:
    import re

    try:
        re.compile(topic)
    except re.error as exc:
        raise click.BadParameter(f"not a regular expression: {exc}", param_hint="TOPIC") from None


def _receive_loop(
    handle: Consumer | Reader, num_messages: int, timeout: float, rate: float, show: _Shown
) -> int:
    """Receive and print (and, from a consumer, acknowledge) until ``num_messages`` (0: until
    Ctrl-C); CommandError after ``timeout`` seconds without a message. The number received."""
    from starquake.client import Consumer
    from starquake.client.exceptions import Timeout

    received = 0
    last_at = next_at = time.monotonic()
    try:
        while num_messages == 0 or received < num_messages:
            if rate:
                time.sleep(max(next_at - time.monotonic(), 0))
                next_at = max(next_at, time.monotonic() - 1) + 1 / rate
            try:
                if isinstance(handle, Consumer):
                    msg = handle.receive(timeout_millis=500)
                else:
                    msg = handle.read_next(timeout_millis=500)
            except Timeout:
                if timeout and time.monotonic() - last_at >= timeout:
                    handle.close()
                    raise CommandError(
                        f"no message for {timeout:g} s after {received} of "
                        f"{num_messages or 'unlimited'} messages"
                    ) from None
                continue
            last_at = time.monotonic()
            received += 1
            show.message(msg)
            if isinstance(handle, Consumer):
                handle.acknowledge(msg)
    except KeyboardInterrupt:
        pass
    return received


class _Shown:
    """How received messages are printed: JSON lines or Pulsar's text, content or not, the
    content as text or as a hex dump."""

    def __init__(self, as_json: bool, hide_content: bool, as_hex: bool) -> None:
        self.as_json = as_json
        self.hide_content = hide_content
        self.as_hex = as_hex

    def message(self, msg: Message) -> None:
        """Print one message."""
        data = msg.data()
        if self.as_json:
            line = message_json(msg)
            if self.hide_content:
                del line["payload"], line["payloadBase64"]
            elif self.as_hex:
                line["payloadHex"] = data.hex()
            print_json_line(line)
            return
        key = msg.partition_key() or "null"
        props = ", ".join(f"{k}={v}" for k, v in msg.properties().items())
        text = f"key:[{key}], properties:[{props}]"
        if not self.hide_content:
            if self.as_hex:
                content = "\n" + "\n".join(hex_dump(data))
            else:
                content = data.decode("utf-8", "replace")
            text += f", content:{content}"
        click.echo("----- got message -----")
        click.echo(text)
