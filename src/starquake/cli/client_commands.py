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
from starquake.cli.params import check_topic, count_option, key_values, split_values
from starquake.cli.security_options import security_args, security_options
from starquake.cli.strict_options import StrictGroup

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


def subscription_options(
    kind_names: tuple[str, str] = ("-t", "--subscription-type"),
    position_names: tuple[str, str] = ("-p", "--subscription-position"),
) -> Callable[[F], F]:
    """The subscription type and initial position options of the consuming commands:
    pulsar-client's ``-t``/``-p`` by default, pulsar-perf's ``-st``/``-sp`` when given."""
    position = click.option(
        *position_names,
        type=click.Choice(POSITIONS, case_sensitive=False),
        default="Latest",
        show_default=True,
        help="where a new subscription starts",
    )
    kind = click.option(
        *kind_names,
        type=click.Choice(SUBSCRIPTION_TYPES, case_sensitive=False),
        default="Exclusive",
        show_default=True,
    )

    def decorate(command: F) -> F:
        return kind(position(command))

    return decorate


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

OUTPUT_OPTION = click.option(
    "--output",
    type=click.Choice(OUTPUT_CHOICES),
    default=None,
    help="json (one JSON object per line) or table; default: table on a terminal",
)


@click.group("client", cls=StrictGroup)
@URL_OPTION
@OUTPUT_OPTION
@security_options
@click.pass_context
def client(ctx: click.Context, url: str, output: str | None) -> None:
    """Produce and consume messages (as pulsar-client)."""
    ctx.obj = ClientContext(url, output, security_args(ctx))


DISABLE_BATCHING = click.option(
    "-db", "--disable-batching", is_flag=True, help="one entry per message"
)
"""``-db/--disable-batching`` of the producing commands (``client produce``, ``perf produce``)."""

VALUE_SCHEMAS = ("bytes", "string")
"""The ``-vs/--value-schema`` types ``client produce`` sends (Pulsar's names)."""


@client.command("produce")
@click.argument("topic")
@click.option("-m", "--messages", multiple=True, help="messages to send (repeatable; see -s)")
@click.option(
    "-f",
    "--files",
    multiple=True,
    help="send each file's content as a message (comma-separated, repeatable)",
)
@click.option(
    "-s",
    "--separator",
    default=",",
    show_default=True,
    help="split each -m value into messages at this text",
)
@count_option("-n", "--num-produce", default=1, help="send the messages this many times")
@click.option(
    "-r",
    "--rate",
    type=click.FloatRange(min=0),
    default=0,
    help="messages per second (0: as fast as possible)",
)
@DISABLE_BATCHING
@click.option(
    "-c",
    "--chunking",
    is_flag=True,
    help="split messages larger than the broker's maximum into chunks (batching is then off)",
)
@click.option(
    "-p", "--properties", multiple=True, help="KEY=VALUE properties, comma-separated (repeatable)"
)
@click.option("-k", "--key", default=None, help="the messages' key (routing and Key_Shared)")
@click.option(
    "-vs",
    "--value-schema",
    type=click.Choice(VALUE_SCHEMAS, case_sensitive=False),
    default="bytes",
    show_default=True,
    help="the schema the producer declares",
)
@click.option(
    "-ks",
    "--key-schema",
    type=click.Choice(VALUE_SCHEMAS, case_sensitive=False),
    default="string",
    show_default=True,
    help="the key's schema of a KeyValue value (unused: -vs has no KeyValue type here)",
)
@OUTPUT_OPTION
@click.pass_obj
def produce(
    ctx: ClientContext,
    topic: str,
    messages: tuple[str, ...],
    files: tuple[str, ...],
    separator: str,
    num_produce: int,
    rate: float,
    disable_batching: bool,
    chunking: bool,
    properties: tuple[str, ...],
    key: str | None,
    value_schema: str,
    key_schema: str,
    output: str | None,
) -> None:
    """Send messages to TOPIC and print how many were stored (their ids with --output json)."""
    name = check_topic(topic)
    payloads = _payloads(messages, files, separator)
    props = key_values(properties, "--properties")
    ids: list[str] = []
    interval = 1 / rate if rate else 0.0
    with open_client(ctx.url, **ctx.client_args) as c:
        producer = c.create_producer(
            name,
            schema=_schema(value_schema),
            batching_enabled=not (disable_batching or chunking),
            chunking_enabled=chunking,
        )
        next_at = time.monotonic()
        for _ in range(num_produce):
            for payload in payloads:
                if interval:
                    delay = next_at - time.monotonic()
                    if delay > 0:
                        time.sleep(delay)
                    next_at += interval
                value: Any = payload.decode() if value_schema.lower() == "string" else payload
                mid = producer.send(value, properties=props or None, partition_key=key)
                ids.append(f"{mid.ledger_id()}:{mid.entry_id()}:{mid.partition()}")
        producer.close()
    if ctx.json(output):
        print_json_line({"topic": name, "produced": len(ids), "messageIds": ids})
    else:
        click.echo(f"{len(ids)} messages successfully produced")


def _payloads(messages: tuple[str, ...], files: tuple[str, ...], separator: str) -> list[bytes]:
    """The messages' payloads: each ``-m`` split at ``separator``, then each file's content."""
    payloads: list[bytes] = []
    for message in messages:
        parts = message.split(separator) if separator else [message]
        payloads.extend(part.encode() for part in parts)
    for path in split_values(files) or []:
        try:
            with open(path, "rb") as f:
                payloads.append(f.read())
        except OSError as exc:
            raise click.BadParameter(
                f"cannot read {path}: {exc.strerror}", param_hint="--files"
            ) from None
    if not payloads:
        raise click.UsageError("give at least one message (-m) or file (-f)")
    return payloads


def _schema(name: str) -> Any:
    """The client schema of a ``-vs`` name."""
    from starquake.client.schema import BytesSchema, StringSchema

    return StringSchema() if name.lower() == "string" else BytesSchema()
