"""``starquake client``: produce and consume messages from the command line, as
``pulsar-client``, with Starquake's own client (``starquake.client``)."""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import TYPE_CHECKING, Any, TypeVar

import click

from starquake.cli.connect import DEFAULT_SERVICE_URL, check_reachable
from starquake.cli.output import (
    OUTPUT_CHOICES,
    CannotConnect,
    CommandError,
    default_output,
    payload_fields,
    print_json_line,
)
from starquake.cli.params import check_topic, count_option, key_values
from starquake.cli.security_options import security_args, security_options

if TYPE_CHECKING:
    from starquake.client import Client, ConsumerType, Message

F = TypeVar("F", bound=Callable[..., Any])

SUBSCRIPTION_TYPES = ("Exclusive", "Shared", "Failover", "Key_Shared")
POSITIONS = ("Earliest", "Latest")


class ClientContext:
    """The service URL and output format given to ``starquake client``."""

    def __init__(
        self, url: str, output: str | None, client_args: dict[str, Any] | None = None
    ) -> None:
        self.url = url
        self.output = output
        self.client_args: dict[str, Any] = dict(client_args or {})
        """Keyword arguments of Client (TLS settings, ...)."""

    def json(self, output: str | None) -> bool:
        """Whether output is JSON, given the command's own ``--output``."""
        return (output or self.output or default_output()) == "json"


@contextmanager
def client_errors(url: str) -> Iterator[None]:
    """Turn the client's exceptions into exit codes (3 cannot connect, 1 refused)."""
    from starquake.client.exceptions import PulsarException

    try:
        yield
    except PulsarException as exc:
        text = str(exc)
        if "cannot connect" in text:
            raise CannotConnect(f"cannot connect to {url}: {text}") from None
        raise CommandError(f"{text} ({type(exc).__name__})") from None


def subscription_options(command: F) -> F:
    """The ``-t/--subscription-type`` and ``-p/--subscription-position`` options of the
    consuming commands (``client consume``, ``perf consume``)."""
    position = click.option(
        "-p",
        "--subscription-position",
        type=click.Choice(POSITIONS, case_sensitive=False),
        default="Latest",
        show_default=True,
        help="where a new subscription starts",
    )
    kind = click.option(
        "-t",
        "--subscription-type",
        type=click.Choice(SUBSCRIPTION_TYPES, case_sensitive=False),
        default="Exclusive",
        show_default=True,
    )
    return kind(position(command))


def checked_url(url: str) -> str:
    """``url`` once a broker answers on it (exit code 3 if none does, 2 if it is malformed)."""
    try:
        check_reachable(url)
    except ValueError as exc:
        raise click.BadParameter(str(exc), param_hint="--url") from None
    return url


@contextmanager
def open_client(url: str, **client_args: Any) -> Iterator[Client]:
    """A blocking client of ``url`` (``client_args``: more keyword arguments of Client), closed
    at the end; exit code 3 if nothing answers."""
    checked_url(url)
    from starquake.client import Client, ConsoleLogger, LoggerLevel

    with client_errors(url):
        client = Client(url, logger=ConsoleLogger(LoggerLevel.Error), **client_args)
    try:
        with client_errors(url):
            yield client
    finally:
        client.close()


def consumer_type_of(name: str) -> ConsumerType:
    """The ConsumerType of a subscription type name (Exclusive, Shared, Failover, Key_Shared)."""
    from starquake.client import ConsumerType

    return {
        "exclusive": ConsumerType.Exclusive,
        "shared": ConsumerType.Shared,
        "failover": ConsumerType.Failover,
        "key_shared": ConsumerType.KeyShared,
    }[name.lower()]


def message_id_text(msg: Message) -> str:
    """``ledger:entry:partition:batchIndex``, as Pulsar prints message ids."""
    mid = msg.message_id()
    return f"{mid.ledger_id()}:{mid.entry_id()}:{mid.partition()}:{mid.batch_index()}"


def message_json(msg: Message) -> dict[str, Any]:
    """A received message as one JSON object (payload as text when it is UTF-8)."""
    return {
        "topic": msg.topic_name(),
        "messageId": message_id_text(msg),
        "key": msg.partition_key() or None,
        "properties": msg.properties(),
        "publishTime": msg.publish_timestamp(),
        "eventTime": msg.event_timestamp(),
        "redeliveryCount": msg.redelivery_count(),
        **payload_fields(msg.data()),
    }


URL_OPTION = click.option(
    "--url",
    envvar="STARQUAKE_URL",
    default=DEFAULT_SERVICE_URL,
    show_default=True,
    help="the broker's service URL, pulsar:// or pulsar+ssl:// (also $STARQUAKE_URL)",
)
"""``--url`` of the ``client`` and ``perf`` groups."""

_OUTPUT = click.option(
    "--output",
    type=click.Choice(OUTPUT_CHOICES),
    default=None,
    help="json (one JSON object per line) or table; default: table on a terminal",
)


@click.group("client")
@URL_OPTION
@_OUTPUT
@security_options
@click.pass_context
def client(ctx: click.Context, url: str, output: str | None) -> None:
    """Produce and consume messages (as pulsar-client)."""
    ctx.obj = ClientContext(url, output, security_args(ctx))


@client.command("produce")
@click.argument("topic")
@click.option("-m", "--messages", multiple=True, help="a message to send (repeatable)")
@click.option(
    "-f",
    "--files",
    multiple=True,
    type=click.Path(exists=True, dir_okay=False),
    help="send this file's content as a message (repeatable)",
)
@click.option("-s", "--separator", default=None, help="also split each -m value at this text")
@count_option("-n", "--num-produce", default=1, help="send the messages this many times")
@click.option("-k", "--key", default=None, help="the messages' key (routing and Key_Shared)")
@click.option(
    "-p", "--properties", multiple=True, help="KEY=VALUE properties, comma-separated (repeatable)"
)
@click.option(
    "-r",
    "--rate",
    type=click.FloatRange(min=0),
    default=0,
    help="messages per second (0: as fast as possible)",
)
@_OUTPUT
@click.pass_obj
def produce(
    ctx: ClientContext,
    topic: str,
    messages: tuple[str, ...],
    files: tuple[str, ...],
    separator: str | None,
    num_produce: int,
    key: str | None,
    properties: tuple[str, ...],
    rate: float,
    output: str | None,
) -> None:
    """Send messages to TOPIC and print how many were stored (their ids with --output json)."""
    name = check_topic(topic)
    payloads: list[bytes] = []
    for message in messages:
        parts = message.split(separator) if separator else [message]
        payloads.extend(part.encode() for part in parts)
    for path in files:
        with open(path, "rb") as f:
            payloads.append(f.read())
    if not payloads:
        raise click.UsageError("give at least one message (-m) or file (-f)")
    props = key_values(properties, "--properties")
    ids: list[str] = []
    interval = 1 / rate if rate else 0.0
    with open_client(ctx.url, **ctx.client_args) as c:
        producer = c.create_producer(name)
        next_at = time.monotonic()
        for _ in range(num_produce):
            for payload in payloads:
                if interval:
                    delay = next_at - time.monotonic()
                    if delay > 0:
                        time.sleep(delay)
                    next_at += interval
                mid = producer.send(payload, properties=props or None, partition_key=key)
                ids.append(f"{mid.ledger_id()}:{mid.entry_id()}:{mid.partition()}")
        producer.close()
    if ctx.json(output):
        print_json_line({"topic": name, "produced": len(ids), "messageIds": ids})
    else:
        click.echo(f"{len(ids)} messages successfully produced")


@client.command("consume")
@click.argument("topic")
@click.option("-s", "--subscription-name", required=True, help="subscription name")
@count_option(
    "-n",
    "--num-messages",
    default=1,
    minimum=0,
    help="messages to consume (0: until interrupted)",
)
@subscription_options
@click.option(
    "--timeout",
    type=click.FloatRange(min=0),
    default=0,
    help="give up after this many seconds without a message (0: wait forever)",
)
@click.option("--hide-content", is_flag=True, help="do not print the messages' content")
@_OUTPUT
@click.pass_obj
def consume(
    ctx: ClientContext,
    topic: str,
    subscription_name: str,
    num_messages: int,
    subscription_type: str,
    subscription_position: str,
    timeout: float,
    hide_content: bool,
    output: str | None,
) -> None:
    """Receive, print and acknowledge messages of TOPIC."""
    name = check_topic(topic)
    as_json = ctx.json(output)
    from starquake.client import InitialPosition
    from starquake.client.exceptions import Timeout

    consumer_type = consumer_type_of(subscription_type)
    position = getattr(InitialPosition, subscription_position.capitalize())
    received = 0
    with open_client(ctx.url, **ctx.client_args) as c:
        consumer = c.subscribe(
            name, subscription_name, consumer_type=consumer_type, initial_position=position
        )
        last_at = time.monotonic()
        try:
            while num_messages == 0 or received < num_messages:
                try:
                    msg = consumer.receive(timeout_millis=500)
                except Timeout:
                    if timeout and time.monotonic() - last_at >= timeout:
                        consumer.close()
                        raise CommandError(
                            f"no message for {timeout:g} s after {received} of "
                            f"{num_messages or 'unlimited'} messages"
                        ) from None
                    continue
                last_at = time.monotonic()
                received += 1
                _print_message(msg, as_json, hide_content)
                consumer.acknowledge(msg)
        except KeyboardInterrupt:
            pass
        consumer.close()
    if not as_json:
        click.echo(f"{received} messages successfully consumed", err=True)


def _print_message(msg: Message, as_json: bool, hide_content: bool) -> None:
    if as_json:
        line = message_json(msg)
        if hide_content:
            del line["payload"], line["payloadBase64"]
        print_json_line(line)
        return
    key = msg.partition_key() or "null"
    props = ", ".join(f"{k}={v}" for k, v in msg.properties().items())
    text = f"key:[{key}], properties:[{props}]"
    if not hide_content:
        text += f", content:{msg.data().decode('utf-8', 'replace')}"
    click.echo("----- got message -----")
    click.echo(text)
