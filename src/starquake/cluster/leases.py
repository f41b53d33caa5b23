"""Leases in a JetStream key-value bucket: who owns a bundle, which brokers are alive, who leads.

A lease is a key whose value names its holder. It is taken with create-if-absent, so one
holder at a time; renewed by a compare-and-set at the revision the holder last wrote; and it
ends when the holder stops renewing: the bucket's values expire ``ttl`` seconds after their
last write (the stream's maximum age, checked by the JetStream servers' clocks), and the
server then writes a marker that watchers see as a deletion. A holder whose renewal is refused
has lost the lease (it expired and perhaps another holder took it) and must stop acting on it.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from nats.js.api import KeyValueConfig
from nats.js.errors import (
    APIError,
    KeyWrongLastSequenceError,
)

from starquake.cluster.jetstream import WRONG_LAST_SEQUENCE, kv_last, live_entries, open_bucket
from starquake.cluster.kv_metadata import key_to_path, path_to_key
from starquake.storage import StorageError


class LeaseLostError(StorageError):
    """The lease was not renewed in time, or someone else holds it now."""


@dataclass(frozen=True, slots=True)
class Lease:
    """A lease held: its name, the holder's value and the revision of the last write."""

    name: str
    value: bytes
    revision: int


def _key(name: str) -> str:
    return path_to_key("/" + name)


class LeaseTable:
    """The leases of one bucket, all with the same time to live."""

    def __init__(self, nc: Any, kv: Any, bucket: str, ttl: float) -> None:
        self._nc = nc
        self._js = nc.jetstream(timeout=5)
        self._kv = kv
        self._bucket = bucket
        self.ttl = ttl

    @classmethod
    async def connect(
        cls,
        servers: list[str],
        *,
        bucket: str,
        ttl: float,
        replicas: int = 1,
        give_up_after: float = 30,
    ) -> LeaseTable:
        config = KeyValueConfig(
            bucket=bucket,
            replicas=replicas,
            history=1,
            ttl=ttl,
            limit_marker_ttl=ttl,
            direct=True,  # lookups read leases while the bucket elects a leader
        )
        nc, kv = await open_bucket(servers, config, give_up_after)
        return cls(nc, kv, bucket, ttl)

    @property
    def connection(self) -> Any:
        """The NATS connection the table uses (for requests among brokers)."""
        return self._nc

    async def acquire(self, name: str, value: bytes) -> Lease | None:
        """Take lease ``name`` for ``value``'s holder; None if another holder has it."""
        key = _key(name)
        try:
            revision = await self._kv.update(key, value, last=0)
        except KeyWrongLastSequenceError:
            held, last = await kv_last(self._js, self._bucket, key)
            if held is not None:
                return None
            try:  # deleted, released or expired: take it after its last marker
                revision = await self._kv.update(key, value, last=last)
            except KeyWrongLastSequenceError:
                return None
        return Lease(name, value, int(revision))

    async def put(self, name: str, value: bytes) -> Lease:
        """Take lease ``name`` whoever holds it: for a name only one live process can claim
        (a broker's own address, which a restarted broker takes over from its dead
        predecessor)."""
        revision = await self._kv.put(_key(name), value)
        return Lease(name, value, int(revision))

    async def renew(self, lease: Lease) -> Lease:
        """Write the lease again before it expires; LeaseLostError if it is no longer ours."""
        try:
            revision = await self._kv.update(_key(lease.name), lease.value, last=lease.revision)
        except KeyWrongLastSequenceError:
            raise LeaseLostError(f"lease {lease.name} was lost") from None
        return Lease(lease.name, lease.value, int(revision))

    async def release(self, lease: Lease) -> None:
        """Give the lease up now (nothing happens if it was lost already)."""
        try:
            await self._kv.delete(_key(lease.name), last=lease.revision)
        except APIError as exc:
            if exc.err_code not in WRONG_LAST_SEQUENCE:
                raise

    async def holder(self, name: str) -> bytes | None:
        """The value of lease ``name``'s holder, or None when nobody holds it."""
        value, _ = await kv_last(self._js, self._bucket, _key(name))
        return value

    async def holders(self) -> dict[str, bytes]:
        """Every lease held now, by name: the holder's value."""
        return {lease.name: lease.value for lease in await self.leases()}

    async def leases(self) -> list[Lease]:
        """Every lease held now (another holder's too: ``release`` of one ends it early)."""
        entries = await live_entries(self._kv, ">")
        return [
            Lease(key_to_path(e.key)[1:], bytes(e.value or b""), int(e.revision)) for e in entries
        ]

    async def close(self) -> None:
        await self._nc.close()
