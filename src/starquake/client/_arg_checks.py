"""Argument handling shared by the asyncio and blocking APIs (checks as the official client's)."""

from __future__ import annotations

import time
from datetime import timedelta
from typing import Any

from starquake.client._config import KeySharedPolicy
from starquake.client._enums import KeySharedMode
from starquake.client._message import Message, MessageId
from starquake.client._outgoing import OutgoingMessage


def check_type(var_type: type | tuple[type, ...], var: Any, name: str) -> None:
    """Raise ValueError unless ``var`` is an instance of ``var_type`` (official behaviour)."""
    if not isinstance(var, var_type):
        type_name = getattr(var_type, "__name__", str(var_type))
        raise ValueError(
            f"Argument {name} is expected to be of type '{type_name}' and not "
            f"'{type(var).__name__}'"
        )


def check_enum(enum_type: type, var: Any, name: str) -> None:
    """:func:`check_type` for an enum argument; the official client's enum of the same name
    (``pulsar.InitialPosition.Earliest``...) is accepted too, as its int value."""
    if type(var).__name__ == enum_type.__name__ and not isinstance(var, enum_type):
        try:
            enum_type(int(var))
        except (TypeError, ValueError):
            pass
        else:
            return
    check_type(enum_type, var, name)


def check_type_or_none(var_type: type | tuple[type, ...], var: Any, name: str) -> None:
    """Like :func:`check_type` but accepts None."""
    if var is not None and not isinstance(var, var_type):
        type_name = getattr(var_type, "__name__", str(var_type))
        raise ValueError(f"Argument {name} is expected to be either None or of type '{type_name}'")


_C_INT = (-(2**31), 2**31 - 1)


def check_c_int(value: int, name: str, *, unsigned: bool = False) -> None:
    """The TypeError the official client's C++ binding raises for an int its C++ setter
    cannot take (outside a C ``int``, or ``unsigned int`` when ``unsigned``)."""
    if unsigned:
        check_c_size(value, name)
        return
    low, high = _C_INT
    if not low <= value <= high:
        raise TypeError(
            f"{name}(): incompatible function arguments. The following argument types are "
            f"supported: (int); invoked with: {value}"
        )


def check_c_size(value: int, name: str, *, unsigned_bits: int = 32) -> None:
    """Like :func:`check_c_int` for an unsigned C++ parameter of ``unsigned_bits`` bits."""
    if not 0 <= value < 2**unsigned_bits:
        raise TypeError(
            f"{name}(): incompatible function arguments. The following argument types are "
            f"supported: (uint{unsigned_bits}); invoked with: {value}"
        )


def check_not_negative(value: int, name: str) -> None:
    """The ValueError of the official client's C++ setters that refuse a negative count."""
    if value < 0:
        raise ValueError(f"{name} needs to be >= 0")


def as_binding_bool(value: Any, name: str) -> bool:
    """A flag the official client hands to its C++ binding unchecked: None is False, numbers
    are their truth value, anything else a TypeError (as the binding converts them)."""
    if value is None or isinstance(value, int | float):
        return bool(value)
    raise TypeError(
        f"{name}(): incompatible function arguments. The following argument types are "
        f"supported: (bool); invoked with: {value!r}"
    )


# Options of the official ``Client`` that tune its C++ runtime: its I/O and listener threads
# and its limit of concurrent lookups. They are checked as there and have no effect here (one
# event loop per client does the I/O).
RUNTIME_TUNING_OPTIONS: dict[str, Any] = {
    "io_threads": 1,
    "message_listener_threads": 1,
    "concurrent_lookup_requests": 50000,
}
# Options of the official ``Client`` that nothing here implements (its periodic statistics):
# only their defaults are accepted. (``log_conf_file_path`` is checked and ignored, as the
# official Python client does with it.)
UNSUPPORTED_CLIENT_OPTIONS: dict[str, Any] = {"stats_interval_in_seconds": 600}


def check_runtime_options(options: dict[str, Any]) -> None:
    """Check the official client's runtime options as it does (ValueError for a wrong type,
    TypeError for an int out of the C++ range); NotImplementedError for a value other than
    the default of one that is not implemented; TypeError for an unknown name."""
    for name in RUNTIME_TUNING_OPTIONS:
        if name in options:
            check_type(int, options[name], name)
            check_c_int(options[name], name)
    check_type_or_none(str, options.get("log_conf_file_path"), "log_conf_file_path")
    if "stats_interval_in_seconds" in options:
        stats = options["stats_interval_in_seconds"]
        check_type(int, stats, "stats_interval_in_seconds")
        check_c_int(stats, "stats_interval_in_seconds", unsigned=True)
    ignored = {*RUNTIME_TUNING_OPTIONS, "log_conf_file_path"}
    refuse_unsupported(
        {k: v for k, v in options.items() if k not in ignored}, UNSUPPORTED_CLIENT_OPTIONS
    )


def refuse_unsupported(options: dict[str, Any], defaults: dict[str, Any]) -> None:
    """Raise NotImplementedError for an option of ``defaults`` given another value than its
    default, TypeError for a name not in ``defaults`` (options accepted but not implemented
    must never be dropped silently)."""
    for name, value in options.items():
        if name not in defaults:
            raise TypeError(f"got an unexpected keyword argument '{name}'")
        default = defaults[name]
        if value != default or type(value) is not type(default):
            raise NotImplementedError(
                f"{name}={value!r} is not supported by starquake.client (only the default, "
                f"{default!r})"
            )


def build_message(
    schema: Any,
    content: Any,
    properties: dict[str, str] | None = None,
    partition_key: str | None = None,
    ordering_key: str | None = None,
    sequence_id: int | None = None,
    replication_clusters: list[str] | None = None,
    disable_replication: bool = False,
    event_timestamp: int | None = None,
    deliver_at: int | None = None,
    deliver_after: timedelta | None = None,
) -> OutgoingMessage:
    """Validate the ``send`` arguments and build the outgoing message."""
    data: bytes | None
    if content is None:
        data = None
    else:
        if schema is None and not isinstance(content, bytes):  # the default BytesSchema's error
            raise TypeError(
                f"Invalid record obj of type {type(content)} - expected type is {bytes}"
            )
        data = schema.encode(content) if schema is not None else content
        check_type(bytes, data, "data")
    check_type_or_none(dict, properties, "properties")
    check_type_or_none(str, partition_key, "partition_key")
    check_type_or_none(str, ordering_key, "ordering_key")
    check_type_or_none(int, sequence_id, "sequence_id")
    check_type_or_none(list, replication_clusters, "replication_clusters")
    check_type(bool, disable_replication, "disable_replication")
    check_type_or_none(int, event_timestamp, "event_timestamp")
    check_type_or_none(int, deliver_at, "deliver_at")
    check_type_or_none(timedelta, deliver_after, "deliver_after")
    _check_message_numbers(sequence_id, event_timestamp, deliver_at)
    when = deliver_at or None
    if deliver_after:
        when = int(time.time() * 1000 + deliver_after.total_seconds() * 1000)
    return OutgoingMessage(
        data,
        properties=dict(properties or {}),
        partition_key=partition_key or None,
        ordering_key=ordering_key.encode("utf-8") if ordering_key else None,
        sequence_id=sequence_id if sequence_id else None,
        event_timestamp=event_timestamp or None,
        deliver_at=when,
        replication_clusters=replication_clusters or None,
        disable_replication=disable_replication,
    )


def _check_message_numbers(
    sequence_id: int | None, event_timestamp: int | None, deliver_at: int | None
) -> None:
    """The range checks of the official client's message builder: TypeError for what its
    C++ setters cannot take, ValueError for a negative sequence id."""
    if sequence_id is not None:
        if not -(2**63) <= sequence_id < 2**63:
            raise TypeError(
                "sequence_id(): incompatible function arguments. The following argument types "
                f"are supported: (int64); invoked with: {sequence_id}"
            )
        if sequence_id < 0:
            raise ValueError("sequenceId needs to be >= 0")
    for name, value in (("event_timestamp", event_timestamp), ("deliver_at", deliver_at)):
        if value is not None:
            check_c_size(value, name, unsigned_bits=64)


def message_id_of(target: Any) -> Message | MessageId:
    """Accept a Message or MessageId (ours); reject anything else like the official client
    (its binding raises TypeError)."""
    if isinstance(target, Message | MessageId):
        return target
    raise TypeError(
        "acknowledge(): incompatible function arguments: expected a Message or MessageId, "
        f"not {type(target).__name__}"
    )


def seek_target(target: Any) -> MessageId | int:
    """A seek argument: a MessageId or a publish timestamp in milliseconds."""
    if isinstance(target, MessageId):
        return target
    if isinstance(target, int) and not isinstance(target, bool):
        check_c_size(target, "seek", unsigned_bits=64)
        return target
    raise ValueError(f"invalid seek_arg type {type(target)}")


def key_shared_policy(policy: Any) -> KeySharedPolicy | None:
    """Normalize a key-shared policy argument."""
    if policy is None or isinstance(policy, KeySharedPolicy):
        return policy
    mode = getattr(policy, "key_shared_mode", KeySharedMode.AutoSplit)
    ranges = getattr(policy, "sticky_ranges", None)
    return KeySharedPolicy(
        KeySharedMode(int(mode)),
        bool(getattr(policy, "allow_out_of_order_delivery", False)),
        tuple((int(a), int(b)) for a, b in ranges) if ranges else None,
    )


def check_sticky_ranges(ranges: list[tuple[int, int]]) -> None:
    """The checks of the official ``KeySharedPolicy.setStickyRanges``."""
    if not ranges:
        raise ValueError("Ranges for KeyShared policy must not be empty.")
    for start, end in ranges:
        if start < 0 or end > 65535:
            raise ValueError("KeySharedPolicy Exception: Ranges must be [0, 65535].")
    for i, (start1, end1) in enumerate(ranges):
        for start2, end2 in ranges[i + 1 :]:
            if start1 <= end2 and start2 <= end1:
                raise ValueError("Ranges for KeyShared policy with overlap.")


_RANGES_SLOT: Any = KeySharedPolicy.__dict__["sticky_ranges"]


def _sticky_pairs(ranges: Any) -> list[tuple[int, int]]:
    """``[(start, end), ...]`` of ints, or TypeError as the official binding raises."""
    pairs: list[tuple[int, int]] = []
    try:
        for item in ranges:
            start, end = item
            if not (isinstance(start, int) and isinstance(end, int)):
                raise TypeError
            pairs.append((start, end))
    except (TypeError, ValueError):
        raise TypeError(
            "set_sticky_ranges(): incompatible function arguments: sticky_ranges must be a "
            "list of (int, int) tuples"
        ) from None
    return pairs


class ConsumerKeySharedPolicy(KeySharedPolicy):
    """Key_Shared policy with the official constructor signature and checks.

    ``sticky_ranges`` are inclusive ``(start, end)`` hash slots in [0, 65535], sent as
    ``KeySharedMeta.hashRanges`` with mode STICKY.
    """

    def __init__(
        self,
        key_shared_mode: KeySharedMode = KeySharedMode.AutoSplit,
        allow_out_of_order_delivery: bool = False,
        sticky_ranges: list[tuple[int, int]] | None = None,
    ) -> None:
        if not isinstance(key_shared_mode, KeySharedMode) and (
            type(key_shared_mode).__name__ != "KeySharedMode"
        ):  # the official client's binding takes its enum only
            raise TypeError(
                "ConsumerKeySharedPolicy(): incompatible function arguments: key_shared_mode "
                f"must be a KeySharedMode, not {key_shared_mode!r}"
            )
        if key_shared_mode == KeySharedMode.Sticky and sticky_ranges is None:
            raise ValueError(
                "When using key_shared_mode = KeySharedMode.Sticky you must also provide "
                "sticky_ranges"
            )
        ranges = _sticky_pairs(sticky_ranges) if sticky_ranges is not None else []
        if sticky_ranges is not None:
            check_sticky_ranges(ranges)
        super().__init__(
            KeySharedMode(int(key_shared_mode)),
            bool(allow_out_of_order_delivery),
            tuple(ranges) if ranges else None,
        )

    @property  # type: ignore[override]
    def sticky_ranges(self) -> list[tuple[int, int]]:
        """The sticky hash ranges, a list (empty unless the mode is Sticky), as the official."""
        return list(_RANGES_SLOT.__get__(self) or ())

    @sticky_ranges.setter
    def sticky_ranges(self, value: tuple[tuple[int, int], ...] | None) -> None:
        _RANGES_SLOT.__set__(self, value)  # only the dataclass __init__ sets it (frozen)

    def policy(self) -> ConsumerKeySharedPolicy:
        """Official-API compatibility: the policy itself."""
        return self


class ConsumerDeadLetterPolicy:
    """Dead letter settings: after ``max_redeliver_count`` redeliveries a message goes to
    ``dead_letter_topic`` (default ``<topic>-<subscription>-DLQ``), see :mod:`._dlq`.

    ``initial_subscription_name`` creates that subscription on the dead letter topic when
    its producer is created, so nothing published there is lost.
    """

    def __init__(
        self,
        max_redeliver_count: int,
        dead_letter_topic: str | None = None,
        initial_subscription_name: str | None = None,
    ) -> None:
        if max_redeliver_count is None or max_redeliver_count < 1:
            raise ValueError("max_redeliver_count must be greater than 0")
        _check_binding_int(max_redeliver_count, "max_redeliver_count", 32)
        self._max = max_redeliver_count
        self._topic = dead_letter_topic or ""
        self._initial = initial_subscription_name or ""

    @property
    def dead_letter_topic(self) -> str:
        """The dead letter topic ("" means ``<topic>-<subscription>-DLQ``)."""
        return self._topic

    @property
    def max_redeliver_count(self) -> int:
        """Redeliveries allowed before a message goes to the dead letter topic."""
        return self._max

    @property
    def initial_subscription_name(self) -> str:
        """Subscription created on the dead letter topic ("" for none)."""
        return self._initial

    def policy(self) -> ConsumerDeadLetterPolicy:
        """Official-API compatibility: the policy itself."""
        return self


def _check_binding_int(value: Any, name: str, bits: int) -> None:
    """The TypeError of the official client's binding for what is not a signed int of
    ``bits`` bits."""
    if not isinstance(value, int) or not -(2 ** (bits - 1)) <= value < 2 ** (bits - 1):
        raise TypeError(
            f"{name}: incompatible function arguments: expected an int{bits}, not {value!r}"
        )


DEFAULT_BATCH_MAX_BYTES = 10 * 1024 * 1024


class ConsumerBatchReceivePolicy:
    """Limits of ``Consumer.batch_receive``: it returns once ``max_num_message`` messages or
    ``max_num_bytes`` bytes are there, or ``timeout_ms`` passed (values < 0 mean no limit).

    As the official client: all three unset is an error; count and bytes both unset fall back
    to the defaults (-1 messages, 10 MB, with the timeout given).
    """

    def __init__(self, max_num_message: int, max_num_bytes: int, timeout_ms: int) -> None:
        _check_binding_int(max_num_message, "max_num_message", 32)
        _check_binding_int(max_num_bytes, "max_num_bytes", 64)
        _check_binding_int(timeout_ms, "timeout_ms", 64)
        if max_num_message <= 0 and max_num_bytes <= 0 and timeout_ms <= 0:
            raise ValueError(
                "At least one of maxNumMessages, maxNumBytes and timeoutMs must be specified."
            )
        if max_num_message <= 0 and max_num_bytes <= 0:
            max_num_message, max_num_bytes = -1, DEFAULT_BATCH_MAX_BYTES
        self.max_num_message = max_num_message
        self.max_num_bytes = max_num_bytes
        self.timeout_ms = timeout_ms

    def getMaxNumMessages(self) -> int:
        return self.max_num_message

    def getMaxNumBytes(self) -> int:
        return self.max_num_bytes

    def getTimeoutMs(self) -> int:
        return self.timeout_ms

    def policy(self) -> ConsumerBatchReceivePolicy:
        """Official-API compatibility: the policy itself."""
        return self


DEFAULT_BATCH_RECEIVE_POLICY = ConsumerBatchReceivePolicy(-1, DEFAULT_BATCH_MAX_BYTES, 100)


def delay_ms_of(delay: Any) -> int:
    """A ``reconsume_later`` delay: milliseconds (int) or a ``timedelta``."""
    if isinstance(delay, timedelta):
        return int(delay.total_seconds() * 1000)
    if isinstance(delay, int) and not isinstance(delay, bool):
        return delay
    raise ValueError("delay must be an int (milliseconds) or a datetime.timedelta")
