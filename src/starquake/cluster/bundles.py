"""Namespace bundles: how Pulsar divides a namespace's topics among brokers.

A namespace's hash space, 0x00000000 to 0xffffffff, is cut at *boundaries* into bundles; a
bundle is named by its two boundaries (``0x40000000_0x80000000``) and holds every topic whose
hash falls in its range: closed below, open above, except the last range, which also holds
0xffffffff. The hash of a topic is the CRC-32 (IEEE polynomial) of its full name in UTF-8; a
partition hashes its own name (``...-partition-3``), so the partitions of one topic spread
over bundles. A new namespace gets ``defaultNumberOfNamespaceBundles`` equal ranges (the last
one absorbs the remainder), and splitting a bundle in two (``range_equally_divide``) cuts its
range at the middle. Boundaries are stored in the namespace's policies as hex strings
(``{"boundaries": ["0x00000000", ...], "numBundles": 4}``).
"""

from __future__ import annotations

import bisect
import itertools
import zlib
from dataclasses import dataclass
from typing import NamedTuple

FULL_LOWER = 0x00000000
FULL_UPPER = 0xFFFFFFFF
_SPACE = 1 << 32
MAX_BUNDLES = 128
"""The most bundles a namespace may have (Pulsar's ``loadBalancerNamespaceMaximumBundles``
default): a namespace asking for more, or a split past it, is refused."""


def topic_hash(topic: str) -> int:
    """The hash that places ``topic`` (its full name, a partition's own name) in a bundle."""
    return zlib.crc32(topic.encode())


def hex_boundary(value: int) -> str:
    """A boundary as Pulsar writes it: ``0x`` and eight lowercase hex digits."""
    return f"0x{value:08x}"


@dataclass(frozen=True, slots=True)
class Bundle:
    """One range of a namespace's hash space."""

    lower: int
    upper: int
    last: bool  # the final range, which includes ``upper`` (0xffffffff)

    @property
    def name(self) -> str:
        """Pulsar's bundle name: ``0xLOWER_0xUPPER``."""
        return f"{hex_boundary(self.lower)}_{hex_boundary(self.upper)}"

    def holds(self, hash_value: int) -> bool:
        return self.lower <= hash_value < self.upper or (self.last and hash_value == self.upper)


class NamespaceBundles:
    """The bundles of one namespace, from its sorted boundaries."""

    __slots__ = ("_boundaries",)

    def __init__(self, boundaries: list[int]) -> None:
        if len(boundaries) < 2 or boundaries[0] != FULL_LOWER or boundaries[-1] != FULL_UPPER:
            raise ValueError("bundle boundaries must start at 0x00000000 and end at 0xffffffff")
        if any(later <= earlier for earlier, later in itertools.pairwise(boundaries)):
            raise ValueError("bundle boundaries must increase strictly")
        if len(boundaries) - 1 > MAX_BUNDLES:
            raise ValueError(f"a namespace may have at most {MAX_BUNDLES} bundles")
        self._boundaries = list(boundaries)

    @classmethod
    def equal(cls, count: int) -> NamespaceBundles:
        """``count`` equal ranges, as a new namespace gets them."""
        if not 0 < count <= MAX_BUNDLES:
            raise ValueError(f"the number of bundles must be from 1 to {MAX_BUNDLES}")
        step = _SPACE // count
        return cls([step * i for i in range(count)] + [FULL_UPPER])

    @classmethod
    def from_policies(cls, data: dict[str, object]) -> NamespaceBundles:
        """From the namespace policies' ``bundles`` object (``boundaries`` as hex strings)."""
        raw = data.get("boundaries")
        if not isinstance(raw, list) or not all(isinstance(b, str) for b in raw):
            raise ValueError("bundles.boundaries must be a list of hex strings")
        try:
            return cls([int(b, 16) for b in raw])
        except ValueError as exc:
            raise ValueError(f"bundles.boundaries: {exc}") from None

    def to_policies(self) -> dict[str, object]:
        """The namespace policies' ``bundles`` object."""
        return {
            "boundaries": [hex_boundary(b) for b in self._boundaries],
            "numBundles": len(self._boundaries) - 1,
        }

    def _bundle(self, index: int) -> Bundle:
        last = index == len(self._boundaries) - 2
        return Bundle(self._boundaries[index], self._boundaries[index + 1], last)

    @property
    def bundles(self) -> list[Bundle]:
        return [self._bundle(i) for i in range(len(self._boundaries) - 1)]

    def find(self, topic: str) -> Bundle:
        """The bundle that holds ``topic``."""
        index = bisect.bisect_right(self._boundaries, topic_hash(topic)) - 1
        # 0xffffffff, the last boundary, belongs to the last range
        return self._bundle(min(index, len(self._boundaries) - 2))

    def bundle_named(self, name: str) -> Bundle:
        """The bundle called ``name`` (``0xLOWER_0xUPPER``); ValueError if there is none."""
        for bundle in self.bundles:
            if bundle.name == name.lower():
                return bundle
        raise ValueError(f"no bundle {name} in this namespace")

    def split(self, name: str) -> NamespaceBundles:
        """The bundles after splitting bundle ``name`` at the middle of its range
        (``range_equally_divide``); a range of one hash value cannot be split."""
        bundle = self.bundle_named(name)
        middle = bundle.lower + (bundle.upper - bundle.lower) // 2
        if middle <= bundle.lower:
            raise ValueError(f"bundle {name} is too small to split")
        return NamespaceBundles(sorted([*self._boundaries, middle]))


class BundleRef(NamedTuple):
    """A namespace bundle: its namespace and its name."""

    namespace: str  # tenant/namespace
    bundle: str  # 0xLOWER_0xUPPER


def bundle_of(topic: str, namespace: str, bundles: NamespaceBundles) -> BundleRef:
    """The bundle holding ``topic`` (its full name; a partition's own name)."""
    return BundleRef(namespace, bundles.find(topic).name)


class NoOwnerError(Exception):
    """No broker serves a topic now, and none could be chosen (the client retries)."""
