"""The broker registry: which brokers are alive, where they listen and how loaded they are.

Each broker holds a lease named by its id (``host:webPort``, Pulsar's broker id) in the
registry's bucket; the value is its :class:`BrokerInfo` as JSON (Pulsar's lookup names for
the URLs, a load report, and a random *incarnation* that tells a restarted broker from its
dead predecessor at the same address). The broker rewrites it every ``ttl / 3`` with a fresh
load report; a broker that dies drops out when its lease expires. A restarted broker takes
its id over at once (only one process can listen on its address).
"""

from __future__ import annotations

import json
import math
import secrets
from dataclasses import asdict, dataclass, field, replace
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:  # the registry's bucket needs NATS; its values do not
    from starquake.cluster.leases import Lease, LeaseTable

# A broker using more than this share of its CPU takes no new bundles while another does not
# (Pulsar's loadBalancerBrokerOverloadedThresholdPercentage).
OVERLOADED_CPU_PERCENT = 85.0


@dataclass(frozen=True, slots=True)
class BrokerLoad:
    """What a broker reports of its load."""

    bundles: int = 0
    topics: int = 0
    msg_rate_in: float = 0.0
    msg_rate_out: float = 0.0
    cpu_percent: float = 0.0


@dataclass(frozen=True, slots=True)
class BrokerInfo:
    """A live broker: its id, its URLs (empty when it has no such listener) and its load."""

    broker_id: str
    broker_url: str
    broker_url_tls: str = ""
    http_url: str = ""
    http_url_tls: str = ""
    incarnation: str = field(default_factory=lambda: secrets.token_hex(8))
    load: BrokerLoad = BrokerLoad()

    def to_json(self) -> bytes:
        return json.dumps(asdict(self), separators=(",", ":")).encode()

    @classmethod
    def from_json(cls, raw: bytes) -> BrokerInfo:
        """Parse a registry value; ValueError when it is not one."""
        try:
            data = json.loads(raw)
            load = BrokerLoad(**data.pop("load", {}))
            return cls(load=load, **data)
        except (TypeError, AttributeError, json.JSONDecodeError) as exc:
            raise ValueError(f"not a broker registration: {exc}") from None

    def with_load(self, load: BrokerLoad) -> BrokerInfo:
        return replace(self, load=load)


def parse_info(raw: bytes | None) -> BrokerInfo | None:
    """A lease's value as the :class:`BrokerInfo` it holds; None when absent or not one."""
    if raw is None:
        return None
    try:
        return BrokerInfo.from_json(raw)
    except ValueError:
        return None


def load_score(load: BrokerLoad) -> float:
    """Lower is less loaded: the message rates in and out, as Pulsar's least-long-term-
    message-rate strategy scores, with an overloaded broker last; the number of bundles
    breaks ties (so that an idle cluster's bundles spread evenly)."""
    if load.cpu_percent >= OVERLOADED_CPU_PERCENT:
        return math.inf
    return load.msg_rate_in + load.msg_rate_out + load.bundles * 1e-3


def least_loaded(brokers: list[BrokerInfo], extra_bundles: dict[str, int]) -> BrokerInfo:
    """The broker to give a new bundle: the lowest score, counting ``extra_bundles`` (bundles
    given to a broker since its last load report) as its own; ties go to the lower id."""
    if not brokers:
        raise ValueError("no live broker")

    def score(broker: BrokerInfo) -> tuple[float, float, str]:
        bundles = broker.load.bundles + extra_bundles.get(broker.broker_id, 0)
        load = replace(broker.load, bundles=bundles)
        return (load_score(load), bundles, broker.broker_id)

    return min(brokers, key=score)


class BrokerRegistry:
    """The registry's bucket, seen from one broker (which may or may not be registered)."""

    def __init__(self, table: LeaseTable) -> None:
        self._table = table
        self._lease: Lease | None = None

    @property
    def ttl(self) -> float:
        return self._table.ttl

    async def register(self, info: BrokerInfo) -> None:
        """Enter (or re-enter with a new load report) this broker."""
        self._lease = await self._table.put(info.broker_id, info.to_json())

    async def refresh(self, info: BrokerInfo) -> None:
        """Write this broker's registration again (a load report); LeaseLostError when it
        expired meanwhile (the broker was cut off for longer than the time to live)."""
        from starquake.cluster.leases import Lease

        if self._lease is None:
            raise RuntimeError("refresh before register")
        self._lease = await self._table.renew(
            Lease(info.broker_id, info.to_json(), self._lease.revision)
        )

    async def unregister(self) -> None:
        if self._lease is not None:
            await self._table.release(self._lease)
            self._lease = None

    async def remove(self, gone: BrokerInfo) -> None:
        """End the registration of the broker incarnation ``gone`` (its process is gone; a
        restarted broker's newer registration at the same id stays)."""
        await end_leases_of(self._table, gone)

    async def brokers(self) -> list[BrokerInfo]:
        """The live brokers, sorted by id (a registration that does not parse is left out)."""
        found = [parse_info(raw) for raw in (await self._table.holders()).values()]
        return sorted((b for b in found if b is not None), key=lambda b: b.broker_id)

    async def broker(self, broker_id: str) -> BrokerInfo | None:
        return parse_info(await self._table.holder(broker_id))


async def end_leases_of(table: LeaseTable, gone: BrokerInfo) -> int:
    """End every lease of ``table`` whose value is the broker incarnation ``gone``; how many.
    A lease renewed meanwhile is left alone (the compare-and-set refuses)."""
    ended = 0
    for lease in await table.leases():
        info = parse_info(lease.value)
        if info is not None and info.incarnation == gone.incarnation:
            await table.release(lease)
            ended += 1
    return ended


def registry_value_fields(info: BrokerInfo) -> dict[str, Any]:
    """The lookup answer's URL fields for ``info``, in Pulsar's names."""
    return {
        "brokerUrl": info.broker_url,
        "brokerUrlTls": info.broker_url_tls,
        "httpUrl": info.http_url,
        "httpUrlTls": info.http_url_tls,
    }
