"""The schema registry: every topic's versioned schemas, kept in the metadata store.

A topic's schemas are shared by its persistent and non-persistent forms and by all partitions
of a partitioned topic: they are filed under the *schema id* ``tenant/namespace/topic`` (the
partitioned topic's local name). Keys and values::

    /schemas/<tenant>/<namespace>/<topic>/<version>   {"type": "AVRO", "data": <base64>,
                                                       "properties": {...}, "name": ...,
                                                       "timestamp": <ms>, "deleted": false}

Versions count from 0 and are never reused. Deleting a topic's schema (without ``force``) adds a
*tombstone* version marked deleted: the versions before it stay readable by number, but they no
longer take part in compatibility checks, and the next schema starts a new history. A forced
delete removes every version.

Every method takes the registry's lock and may write (and fsync) the store: the broker calls
them off the event loop. Compatibility is checked and the new version stored under the same
lock, so two producers racing with different schemas cannot both pass against the same history.
"""

from __future__ import annotations

import base64
import json
import logging
import threading
import time
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from starquake.broker.errors import MetadataError
from starquake.broker.schemas.compatibility import (
    IncompatibleSchemaError,
    InvalidSchemaError,
    check_compatible,
    check_consumer_compatible,
    find_version,
    validate,
)
from starquake.common.schema_info import SchemaInfo, SchemaType
from starquake.common.topic_name import TopicName
from starquake.storage import ABSENT, BadVersionError, MetadataStore, StorageError

log = logging.getLogger(__name__)

__all__ = ["SchemaRegistry", "StoredSchema", "schema_id"]

_ROOT = "/schemas"


def schema_id(topic: TopicName) -> str:
    """The id a topic's schemas are filed under: ``tenant/namespace/topic`` of its base name."""
    base = topic.partitioned_topic_name
    return f"{base.tenant}/{base.namespace}/{base.local_name}"


@dataclass(frozen=True)
class StoredSchema:
    """One version of a topic's schema (a tombstone when ``deleted``)."""

    version: int
    info: SchemaInfo
    timestamp: int
    deleted: bool = False

    def to_json(self) -> bytes:
        """The schema as stored in the metadata store (JSON, data in base64)."""
        return json.dumps(
            {
                "type": self.info.type.name,
                "data": base64.b64encode(self.info.data).decode(),
                "properties": self.info.properties,
                "name": self.info.name,
                "timestamp": self.timestamp,
                "deleted": self.deleted,
            },
            sort_keys=True,
        ).encode()

    @classmethod
    def from_json(cls, version: int, raw: bytes) -> StoredSchema:
        """The schema version ``version`` stored as ``raw``."""
        value: dict[str, Any] = json.loads(raw)
        info = SchemaInfo(
            SchemaType[value["type"]],
            base64.b64decode(value["data"]),
            dict(value.get("properties") or {}),
            str(value.get("name", "")),
        )
        return cls(version, info, int(value["timestamp"]), bool(value.get("deleted")))


class SchemaRegistry:
    """Versioned schemas per schema id, read through an in-memory cache."""

    def __init__(self, store: MetadataStore) -> None:
        self._store = store
        self._lock = threading.Lock()
        self._cache: dict[str, list[StoredSchema]] = {}
        self._stale: set[str] = set()

    def forget(self, sid: str) -> None:
        """Read the schemas of ``sid`` from the store again when next used (another broker
        changed them). Takes no lock: safe on the event loop."""
        self._stale.add(sid)

    # --- reading ------------------------------------------------------------------------------

    def _history(self, sid: str) -> list[StoredSchema]:
        if sid in self._stale:
            self._stale.discard(sid)
            self._cache.pop(sid, None)
        history = self._cache.get(sid)
        if history is None:
            base = f"{_ROOT}/{sid}"
            history = []
            for child in self._store.list_children(base):
                try:
                    raw = self._store.get(f"{base}/{child}")
                except StorageError as exc:  # a damaged stored version: refuse, never guess
                    log.error("schemas of %s cannot be read: %s", sid, exc)
                    raise MetadataError(str(exc)) from exc
                if raw is not None and child.isdigit():
                    history.append(StoredSchema.from_json(int(child), raw))
            history.sort(key=lambda s: s.version)
            self._cache[sid] = history
        return history

    @staticmethod
    def _live(history: Sequence[StoredSchema]) -> list[StoredSchema]:
        for i in range(len(history) - 1, -1, -1):
            if history[i].deleted:
                return list(history[i + 1 :])
        return list(history)

    def live(self, sid: str) -> list[StoredSchema]:
        """The versions since the last deletion, oldest first: those checked for compatibility."""
        with self._lock:
            return self._live(self._history(sid))

    def has_schema(self, sid: str) -> bool:
        """Whether the topic has a schema now (a live version)."""
        return bool(self.live(sid))

    def get(self, sid: str, version: int | None = None) -> StoredSchema | None:
        """Version ``version`` (the latest when None); None when there is no such version, or
        when it (or, for the latest, the last version) is a deletion."""
        with self._lock:
            history = self._history(sid)
            if version is None:
                found = history[-1] if history else None
            else:
                found = next((s for s in history if s.version == version), None)
            return None if found is None or found.deleted else found

    def version_of(self, sid: str, info: SchemaInfo) -> int | None:
        """The live version with the same definition as ``info``, if any."""
        with self._lock:
            live = self._live(self._history(sid))
            index = find_version(info, [s.info for s in live])
            return None if index is None else live[index].version

    # --- checking and adding ------------------------------------------------------------------

    def _append(self, sid: str, stored: StoredSchema) -> None:
        try:  # a version number is taken once, also by brokers sharing the store
            self._store.put(f"{_ROOT}/{sid}/{stored.version}", stored.to_json(), ABSENT)
        except BadVersionError:
            self._cache.pop(sid, None)
            raise MetadataError(
                f"schema version {stored.version} of {sid} was just added elsewhere; try again"
            ) from None
        self._history(sid).append(stored)

    def _next_version(self, sid: str) -> int:
        history = self._history(sid)
        return history[-1].version + 1 if history else 0

    def add_schema(
        self, sid: str, info: SchemaInfo, strategy: str, *, allow_new: bool = True
    ) -> int:
        """The version of ``info``: an existing live version with the same definition, else a
        new version stored after a compatibility check against the live ones.

        Raises InvalidSchemaError for a bad definition, IncompatibleSchemaError when the check
        fails or when ``allow_new`` is false and no version matches.
        """
        validate(info)
        with self._lock:
            return self._add_locked(sid, info, strategy, allow_new)

    def _add_locked(self, sid: str, info: SchemaInfo, strategy: str, allow_new: bool) -> int:
        """:meth:`add_schema` for a valid ``info``, the lock held."""
        live = self._live(self._history(sid))
        index = find_version(info, [s.info for s in live], parsed=True)
        if index is not None:
            return live[index].version
        if not allow_new:
            raise IncompatibleSchemaError("Schema not found and schema auto updating is disabled.")
        if live:
            check_compatible(info, [s.info for s in live], strategy)
        stored = StoredSchema(self._next_version(sid), info, _now_ms())
        self._append(sid, stored)
        return stored.version

    def admit_consumer(
        self, sid: str, info: SchemaInfo, strategy: str, *, idle: bool, allow_new: bool
    ) -> None:
        """Whether a consumer with ``info`` may read the topic (raises when not).

        On an ``idle`` topic without a schema, ``info`` is registered as its first version
        (when ``allow_new``). Otherwise ALWAYS_COMPATIBLE admits any consumer, a registered
        definition is admitted, and any other must be compatible as a reader.
        """
        with self._lock:
            live = self._live(self._history(sid))
            if not live and idle:
                validate(info)
                self._add_locked(sid, info, strategy, allow_new)
                return
            if strategy == "ALWAYS_COMPATIBLE":
                return
            existing = [s.info for s in live]
            if find_version(info, existing) is not None:
                return
            validate(info)
            if not live:
                raise IncompatibleSchemaError("Topic does not have schema to check")
            check_consumer_compatible(info, existing, strategy)

    def is_compatible(self, sid: str, info: SchemaInfo, strategy: str) -> tuple[bool, str]:
        """Whether ``info`` could be added (nothing is stored), and why not."""
        try:
            validate(info)
            live = self.live(sid)
            if live and find_version(info, [s.info for s in live]) is None:
                check_compatible(info, [s.info for s in live], strategy)
        except (InvalidSchemaError, IncompatibleSchemaError) as exc:
            return False, exc.message
        return True, ""

    # --- deleting -----------------------------------------------------------------------------

    def delete(self, sid: str, *, force: bool = False) -> int | None:
        """Delete the topic's schema; return the tombstone's version (None when there was no
        live schema, or when ``force`` removed every version)."""
        with self._lock:
            history = self._history(sid)
            if force:
                if history:
                    self._store.put_many((f"{_ROOT}/{sid}/{s.version}", None) for s in history)
                self._cache[sid] = []
                return None
            if not self._live(history):
                return None
            tombstone = StoredSchema(
                self._next_version(sid), SchemaInfo(SchemaType.NONE), _now_ms(), deleted=True
            )
            self._append(sid, tombstone)
            return tombstone.version


def _now_ms() -> int:
    return int(time.time() * 1000)
