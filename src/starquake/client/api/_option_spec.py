"""Declaring the keyword arguments of the public client API once: :class:`Option` and
:class:`OptionTable`.

Each option of ``Client``, ``create_producer``, ``subscribe``, ``create_reader`` and ``send``
is declared once (name, default, checks, conversion) in :mod:`._options`. The blocking and the
asyncio front-ends keep explicit signatures (the official client's names and defaults, which
users and IDEs see) and hand their arguments to the table::

    options = PRODUCER_OPTIONS.collect(locals())

which checks them as the official client does, in its two phases: first the Python type checks
of every argument (ValueError), then what its C++ binding refuses (TypeError for an int out of
the range of the C++ setter, ...), then the checks across arguments.
"""

from __future__ import annotations

import dataclasses
import enum
import operator
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from functools import partial
from operator import itemgetter
from typing import Any, Generic, TypeVar

from starquake.client.base._arg_checks import check_enum, check_type, check_type_or_none

T = TypeVar("T")
E = TypeVar("E", bound=enum.IntEnum)
Check = Callable[[Any, str], None]
"""``check(value, name)``: raises the official client's exception for a bad value."""


def accept(value: Any, name: str) -> None:
    """The check of an option the official client does not check."""


class _Required:
    """The default of a parameter without one (``topic``, ``subscription_name``...)."""

    def __repr__(self) -> str:
        return "REQUIRED"


REQUIRED: Any = _Required()
_ABSENT: Any = _Required()  # an option a front-end does not have


@dataclass(frozen=True, slots=True)
class Option(Generic[T]):
    """One argument of the public API.

    ``check`` runs first (the official client's Python type check), ``binding`` after every
    option passed ``check`` and never on None (what the official C++ binding refuses), then
    ``convert`` turns the value into what the config holds (an enum member of ours...).
    """

    name: str
    default: T
    check: Check = accept
    binding: Check = accept
    convert: Callable[[Any], T] | None = None


def typed(
    name: str,
    default: T,
    kind: type | tuple[type, ...],
    *,
    binding: Check = accept,
    convert: Callable[[Any], T] | None = None,
) -> Option[T]:
    """An option that must be a ``kind`` (or None when its default is None)."""
    check = partial(check_type_or_none if default is None else check_type, kind)
    return Option(name, default, check, binding, convert)


def enum_option(name: str, default: E) -> Option[E]:
    """An enum option: a member of our enum or of the official client's enum of that name."""
    kind = type(default)
    return Option(name, default, partial(check_enum, kind), convert=lambda v: kind(int(v)))


def required(name: str, check: Check = accept) -> Option[Any]:
    """A parameter without a default."""
    return Option(name, REQUIRED, check)


def checks(*steps: Check) -> Check:
    """One check made of ``steps``, in order."""

    def run(value: Any, name: str) -> None:
        for step in steps:
            step(value, name)

    return run


class OptionTable:
    """The options of one method of the public API, in the official order.

    ``validate`` checks the collected values across options (batching and chunking together,
    ...); front-ends that differ from the blocking API in a default take a copy made with
    :meth:`but`.
    """

    def __init__(
        self,
        method: str,
        *options: Option[Any],
        validate: Callable[[dict[str, Any]], None] | None = None,
        plain: tuple[str, ...] = (),
    ) -> None:
        self.method = method
        self._options = {option.name: option for option in options}
        self._validate = validate
        self.plain = plain
        """Parameters of the front-ends that are no options (``send``'s value and callback):
        the front-end takes them as they are."""
        # For collect(), on the path of every send: the values are fetched at once and
        # compared with the defaults in one pass (C loops).
        self._names = tuple(self._options)
        assert len(self._names) > 1, "itemgetter of one name returns no tuple"
        self._fetch = itemgetter(*self._names)
        self._defaults = tuple(option.default for option in self._options.values())
        self._default_values = dict(zip(self._names, self._defaults, strict=True))
        self._conversions = tuple(
            (option.name, option.convert) for option in self if option.convert is not None
        )

    def __iter__(self) -> Iterator[Option[Any]]:
        return iter(self._options.values())

    def __getitem__(self, name: str) -> Option[Any]:
        return self._options[name]

    def __contains__(self, name: object) -> bool:
        return name in self._options

    def but(self, *options: Option[Any]) -> OptionTable:
        """A copy with ``options`` in place of those of the same names."""
        replaced = {**self._options, **{option.name: option for option in options}}
        unknown = replaced.keys() - self._options.keys()
        assert not unknown, unknown
        return OptionTable(
            self.method, *replaced.values(), validate=self._validate, plain=self.plain
        )

    def with_defaults(self, **defaults: Any) -> OptionTable:
        """A copy with other defaults (the asyncio API's ``batching_enabled=True``...)."""
        return self.but(
            *(dataclasses.replace(self[name], default=v) for name, v in defaults.items())
        )

    def pick(self, arguments: Mapping[str, Any]) -> dict[str, Any]:
        """The values of this table's options among ``arguments`` (a front-end's
        ``locals()``), unchecked: what a front-end forwards to another."""
        return {name: arguments[name] for name in self._options if name in arguments}

    def collect(
        self, arguments: Mapping[str, Any], extra: Mapping[str, Any] | None = None
    ) -> dict[str, Any]:
        """The checked and converted values of this table's options among ``arguments`` (a
        front-end's ``locals()``) and ``extra`` (its ``**kwargs``: TypeError for a name that
        is not an option, as Python raises for an unexpected keyword argument)."""
        try:
            found = self._fetch(arguments)
        except KeyError:  # a front-end without some options (the asyncio subscribe...)
            found = tuple(arguments.get(name, _ABSENT) for name in self._names)
        if not extra and all(map(operator.is_, found, self._defaults)):
            values = self._default_values.copy()  # nothing to check
        else:
            values = dict(zip(self._names, found, strict=True))
            self._check(values, extra or {})
        for name, convert in self._conversions:
            if name in values:
                values[name] = convert(values[name])
        if self._validate is not None:
            self._validate(values)
        return values

    def _check(self, values: dict[str, Any], extra: Mapping[str, Any]) -> None:
        """Check the values not at their default (a default passes its checks: tested), in
        the official client's phases; add ``extra`` and drop the options a front-end does
        not have."""
        for name, value in extra.items():
            if name not in self._options:
                raise TypeError(f"{self.method}() got an unexpected keyword argument '{name}'")
            values[name] = value
        for name in [name for name, value in values.items() if value is _ABSENT]:
            del values[name]
        given = [o for o in self if o.name in values and values[o.name] is not o.default]
        for option in given:
            option.check(values[option.name], option.name)
        for option in given:
            if values[option.name] is not None:
                option.binding(values[option.name], option.name)
