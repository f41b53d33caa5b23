"""Argument handling shared by the asyncio and blocking APIs (checks as the official client's)."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

from starquake.client.base._config import KeySharedPolicy
from starquake.client.base._enums import KeySharedMode
from starquake.client.base._message import Message, MessageId


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
    ``dead_letter_topic`` (default ``<topic>-<subscription>-DLQ``), see
    :mod:`starquake.client.consumer._dlq`.

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
