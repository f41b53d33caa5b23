"""The one declaration of the client's arguments (``starquake.client.api._options``) against the
front-ends that use it and against the official client: every parameter of every public
front-end method is an option of its table with the table's default, and every parameter of
the official method is there with the official default."""

from __future__ import annotations

import asyncio
import dataclasses
import enum
import inspect
import uuid
from collections.abc import Callable
from typing import Any

import pulsar
import pulsar.asyncio
import pytest
from official_client import make_client

import starquake.client
import starquake.client.asyncio as sq_aio
from starquake.broker.embedded import EmbeddedBroker
from starquake.client.api import _options
from starquake.client.api._option_spec import REQUIRED, OptionTable
from starquake.client.base import _config

sq = starquake.client

# (front-end method, its table, the official method; None where the official has no such
# method, or takes ``**kwargs`` only: the asyncio Client takes the blocking Client's)
FRONT_ENDS: list[tuple[str, Callable[..., Any], OptionTable, Callable[..., Any]]] = [
    ("Client", sq.Client.__init__, _options.CLIENT_OPTIONS, pulsar.Client.__init__),
    ("asyncio.Client", sq_aio.Client.__init__, _options.CLIENT_OPTIONS, pulsar.Client.__init__),
    (
        "create_producer",
        sq.Client.create_producer,
        _options.PRODUCER_OPTIONS,
        pulsar.Client.create_producer,
    ),
    (
        "asyncio.create_producer",
        sq_aio.Client.create_producer,
        _options.ASYNC_PRODUCER_OPTIONS,
        pulsar.asyncio.Client.create_producer,
    ),
    ("subscribe", sq.Client.subscribe, _options.CONSUMER_OPTIONS, pulsar.Client.subscribe),
    (
        "asyncio.subscribe",
        sq_aio.Client.subscribe,
        _options.CONSUMER_OPTIONS,
        pulsar.asyncio.Client.subscribe,
    ),
    (
        "create_reader",
        sq.Client.create_reader,
        _options.READER_OPTIONS,
        pulsar.Client.create_reader,
    ),
    (
        "asyncio.create_reader",
        sq_aio.Client.create_reader,
        _options.READER_OPTIONS,
        pulsar.asyncio.Client.create_reader,
    ),
    ("send", sq.Producer.send, _options.MESSAGE_OPTIONS, pulsar.Producer.send),
    ("send_async", sq.Producer.send_async, _options.MESSAGE_OPTIONS, pulsar.Producer.send_async),
    (
        "asyncio.send",
        sq_aio.Producer.send,
        _options.ASYNC_MESSAGE_OPTIONS,
        pulsar.asyncio.Producer.send,
    ),
]
IDS = [name for name, *_ in FRONT_ENDS]
_VARIADIC = (inspect.Parameter.VAR_POSITIONAL, inspect.Parameter.VAR_KEYWORD)


def _parameters(method: Callable[..., Any]) -> dict[str, Any]:
    """Name -> default (REQUIRED for none) of ``method``'s named parameters but ``self``."""
    return {
        p.name: REQUIRED if p.default is inspect.Parameter.empty else p.default
        for p in list(inspect.signature(method).parameters.values())[1:]
        if p.kind not in _VARIADIC
    }


def _same_default(official: Any, ours: Any) -> bool:
    """Our default stands for the official one: equal, the same enum member (the official
    enums are the C extension's), or None for the official default ``BytesSchema()``."""
    if isinstance(official, pulsar.schema.BytesSchema):
        return ours is None
    if isinstance(ours, enum.Enum):
        return (type(ours).__name__, ours.name, int(ours)) == (
            type(official).__name__,
            official.name,
            int(official),
        )
    return bool(official == ours) and type(official) is type(ours)


@pytest.mark.parametrize(("name", "front", "table", "official"), FRONT_ENDS, ids=IDS)
def test_every_parameter_is_an_option_with_the_declared_default(
    name: str, front: Any, table: OptionTable, official: Any
) -> None:
    wrong = [
        (param, default, table[param].default if param in table else "not declared")
        for param, default in _parameters(front).items()
        if param not in table.plain
        and (
            param not in table
            or (table[param].default is not default and table[param].default != default)
        )
    ]
    assert wrong == [], f"{name}: (parameter, front-end default, declared)"


@pytest.mark.parametrize(("name", "front", "table", "official"), FRONT_ENDS, ids=IDS)
def test_every_official_parameter_is_there_with_the_official_default(
    name: str, front: Any, table: OptionTable, official: Any
) -> None:
    ours = _parameters(front)
    theirs = _parameters(official)
    if name == "asyncio.Client":  # the official one hands its **kwargs to the blocking Client
        assert set(_parameters(pulsar.asyncio.Client.__init__)) == {"service_url"}
    wrong = []
    for param, default in theirs.items():
        if param not in ours and name == "asyncio.Client":  # a keyword of **runtime_options
            ours[param] = table[param].default
        if param not in ours or not _same_default(default, ours[param]):
            wrong.append((param, default, ours.get(param, "missing")))
    assert wrong == [], f"{name}: (parameter, official default, ours)"


def test_every_declared_option_is_used_by_a_front_end() -> None:
    used: dict[str, set[str]] = {}  # per method: blocking and asyncio
    for _name, front, table, _official in FRONT_ENDS:
        used.setdefault(table.method, set()).update(_parameters(front))
    for _name, _front, table, _official in FRONT_ENDS:
        unused = {o.name for o in table} - used[table.method]
        if table is _options.CLIENT_OPTIONS:  # the asyncio Client takes them as **kwargs
            unused -= {"io_threads", "message_listener_threads", "concurrent_lookup_requests"}
            unused -= {"log_conf_file_path", "stats_interval_in_seconds"}
        assert unused == set(), table.method


def test_the_asyncio_api_differs_only_where_the_official_one_does() -> None:
    """batching on by default in the asyncio create_producer, disable_replication unset in
    its send; the delay may be a float there (a Starquake extension)."""
    pairs = [
        (_options.PRODUCER_OPTIONS, _options.ASYNC_PRODUCER_OPTIONS),
        (_options.MESSAGE_OPTIONS, _options.ASYNC_MESSAGE_OPTIONS),
    ]
    differ = {
        o.name: (o.default, a.default)
        for blocking, aio in pairs
        for o, a in zip(blocking, aio, strict=True)
        if o.default != a.default or type(o.default) is not type(a.default)
    }
    assert differ == {"batching_enabled": (False, True), "disable_replication": (False, None)}


def test_an_unknown_keyword_names_the_method() -> None:
    with pytest.raises(TypeError, match=r"Client\(\) got an unexpected keyword argument 'nope'"):
        _options.CLIENT_OPTIONS.collect({"service_url": "pulsar://localhost:6650"}, {"nope": 1})


def test_type_checks_run_before_the_range_checks_as_in_the_official_client() -> None:
    """The official client checks every argument's type (ValueError) before its C++ binding
    refuses an int out of range (TypeError)."""
    arguments = {"topic": "t", "send_timeout_millis": 2**40, "chunking_enabled": "x"}
    with pytest.raises(ValueError, match="chunking_enabled"):
        _options.PRODUCER_OPTIONS.collect(arguments)
    with pytest.raises(TypeError, match="send_timeout_millis"):
        _options.PRODUCER_OPTIONS.collect({**arguments, "chunking_enabled": False})


@pytest.mark.parametrize("module", [pulsar, starquake.client], ids=["official", "starquake"])
def test_subscribe_takes_every_official_argument_by_position(
    module: Any, broker: EmbeddedBroker
) -> None:
    """All 26 positional arguments of the official ``subscribe``; the 14th is the pattern
    discovery period and the 15th the initial position (Earliest: the message sent before
    is received)."""
    topic = f"persistent://public/default/opts-{uuid.uuid4().hex[:8]}"
    client = make_client(module, broker)
    try:
        client.create_producer(topic).send(b"before")
        args = list(_parameters(pulsar.Client.subscribe).values())
        args[:5] = [topic, "sub", module.ConsumerType.Shared, module.schema.BytesSchema(), None]
        args[13] = 30
        args[14] = module.InitialPosition.Earliest
        args[25] = module.ConsumerCryptoFailureAction.FAIL  # the others: official enums
        consumer = client.subscribe(*args)
        assert consumer.receive(5000).data() == b"before"
        consumer.close()
    finally:
        client.close()


def test_asyncio_send_leaves_disable_replication_unset_by_default(broker: EmbeddedBroker) -> None:
    async def scenario(module: Any) -> list[bool]:
        client = module.Client(broker.service_url, operation_timeout_seconds=10)
        try:
            producer = await client.create_producer(
                f"persistent://public/default/opts-{uuid.uuid4().hex[:8]}"
            )
            ids = [await producer.send(b"a"), await producer.send(b"b", disable_replication=None)]
            return [i is not None for i in ids]
        finally:
            await client.close()

    assert asyncio.run(scenario(pulsar.asyncio)) == [True, True]
    assert asyncio.run(scenario(sq_aio)) == [True, True]


def _declared(option: Any) -> Any:
    """An option's default as the config holds it."""
    return option.convert(option.default) if option.convert else option.default


@pytest.mark.parametrize(
    ("config_type", "table"),
    [
        (_config.ClientConfig, _options.CLIENT_OPTIONS),
        (_config.ProducerConfig, _options.ASYNC_PRODUCER_OPTIONS),
        (_config.ConsumerConfig, _options.CONSUMER_OPTIONS),
    ],
)
def test_the_config_defaults_are_the_declared_ones(config_type: type, table: OptionTable) -> None:
    """The configs built from the options (and directly, by the dead letter producer, the
    table view...) default to what the asyncio API declares."""
    wrong = []
    for field in dataclasses.fields(config_type):
        if field.name not in table or table[field.name].default is REQUIRED:
            continue
        default = field.default_factory() if callable(field.default_factory) else field.default
        if default != _declared(table[field.name]):
            wrong.append((field.name, default, _declared(table[field.name])))
    assert wrong == []


TABLES = [
    _options.CLIENT_OPTIONS,
    _options.PRODUCER_OPTIONS,
    _options.ASYNC_PRODUCER_OPTIONS,
    _options.CONSUMER_OPTIONS,
    _options.READER_OPTIONS,
    _options.MESSAGE_OPTIONS,
    _options.ASYNC_MESSAGE_OPTIONS,
]


@pytest.mark.parametrize("table", TABLES, ids=[f"{t.method}-{i}" for i, t in enumerate(TABLES)])
def test_every_default_passes_its_checks(table: OptionTable) -> None:
    """What lets collect() skip the checks of the arguments left at their default."""
    for option in table:
        if option.default is not REQUIRED:
            option.check(option.default, option.name)
            if option.default is not None:
                option.binding(option.default, option.name)


def test_a_value_equal_to_the_default_but_of_another_type_is_checked() -> None:
    """0 is not False: the check of a flag refuses it though it equals its default."""
    with pytest.raises(ValueError, match="disable_replication"):
        _options.MESSAGE_OPTIONS.collect({"disable_replication": 0, "content": b"x"})
