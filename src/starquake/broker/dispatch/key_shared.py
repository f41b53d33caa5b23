"""Key_Shared: every entry goes to the consumer that owns its sticky key's hash.

The owner comes from a :mod:`starquake.broker.selectors` selector (consistent hashing by default,
auto-split hash ranges, or the consumers' own sticky ranges). An entry whose owner cannot take it
now (no permits, unacked limit) waits in the replay set; so does every later entry with the same
hash, which keeps each key's messages in order while other keys flow.

Ordering across membership changes has two guards:

* *draining hashes* (as Pulsar 4 does it, PIP-379): while a consumer holds unacknowledged
  messages of a hash, no other consumer gets messages of that hash; when the selector moves the
  hash elsewhere, the new owner waits until the old one has acknowledged (or, leaving, handed
  back) them. This is what keeps each key in order when ownership moves.
* *recently joined consumers* (Pulsar 2.x/3.x): a consumer that joins while earlier messages are
  still unacknowledged records the cursor's read position (``readPositionWhenJoining``, shown in
  the stats); it receives entries at or after that position only once every entry before it is
  acknowledged.

A consumer that set ``allowOutOfOrderDelivery`` skips both guards.
"""

from __future__ import annotations

from collections import Counter
from typing import TYPE_CHECKING

from starquake.broker.consumer import Consumer, Dispatch
from starquake.broker.dispatch.shared import SharedDispatcher
from starquake.broker.entry_info import EntryInfo
from starquake.broker.errors import ConsumerAssignError
from starquake.broker.selectors import (
    ConsistentHashingSelector,
    HashRangeAutoSplitSelector,
    HashRangeExclusiveSelector,
    StickyKeyConsumerSelector,
    sticky_key_hash,
)
from starquake.broker.selectors import ConsumerAssignError as SelectorRefusal
from starquake.storage import Entry, Position

if TYPE_CHECKING:
    from starquake.broker.dispatch.base import DispatchedSubscription

_HASH_MEMO_MAX = 65536


class KeySharedDispatcher(SharedDispatcher):
    """Dispatcher for Key_Shared subscriptions."""

    def __init__(
        self, subscription: DispatchedSubscription, max_read_batch: int, *, sticky: bool
    ) -> None:
        super().__init__(subscription, max_read_batch)
        config = subscription.topic.service.config
        self.sticky = sticky
        self.selector: StickyKeyConsumerSelector[Consumer]
        if sticky:
            self.selector = HashRangeExclusiveSelector()
        elif config.subscriptionKeySharedUseConsistentHashing:
            self.selector = ConsistentHashingSelector(
                config.subscriptionKeySharedConsistentHashingReplicaPoints
            )
        else:
            self.selector = HashRangeAutoSplitSelector()
        self.recently_joined: dict[Consumer, Position] = {}
        self._replay_hashes: dict[Position, int] = {}
        self._held_hashes: Counter[int] = Counter()
        self._hash_memo: dict[bytes, int] = {}
        # Draining hashes: hash -> [consumer holding its unacked messages, how many entries].
        self._draining: dict[int, tuple[Consumer, int]] = {}
        self._pending_hash: dict[Position, int] = {}

    # --- membership -----------------------------------------------------------------------------

    def add_consumer(self, consumer: Consumer) -> None:
        """Give a consumer its hash ranges; it waits for keys already in flight."""
        try:
            self.selector.add_consumer(consumer, consumer.name, consumer.key_hash_ranges)
        except SelectorRefusal as exc:
            raise ConsumerAssignError(str(exc)) from None
        cursor = self.subscription.cursor
        ledger = self.subscription.topic.ledger
        first_unacked = ledger.next_position(cursor.mark_delete_position)
        if (
            not consumer.allow_out_of_order
            and self.consumers
            and cursor.read_position > first_unacked
        ):
            consumer.read_position_when_joining = cursor.read_position
            self.recently_joined[consumer] = cursor.read_position
        self.consumers.append(consumer)
        self.schedule()

    def remove_consumer(self, consumer: Consumer) -> None:
        """Hand a consumer's hash ranges and unacknowledged messages to others."""
        self.selector.remove_consumer(consumer)
        self.recently_joined.pop(consumer, None)
        super().remove_consumer(consumer)

    def on_mark_delete_moved(self) -> None:
        """Release recently joined consumers whose earlier messages are all acknowledged."""
        if not self.recently_joined:
            return
        ledger = self.subscription.topic.ledger
        first_unacked = ledger.next_position(self.subscription.cursor.mark_delete_position)
        released = [c for c, p in self.recently_joined.items() if first_unacked >= p]
        for consumer in released:
            del self.recently_joined[consumer]
        if released:
            self.schedule()

    def key_hash_ranges(self) -> dict[Consumer, list[tuple[int, int]]]:
        """Each consumer's hash ranges (for the stats)."""
        return self.selector.consumer_key_hash_ranges()

    # --- replay bookkeeping ---------------------------------------------------------------------

    def entries_to_read(self, permits: int) -> int:
        """As many entries as messages the permits allow, up to ``max_read_batch``: the
        entries of keys whose consumers are full wait in the replay set while the others go,
        so a read looks ahead as far as the permits of all the consumers."""
        return max(1, min(permits, self.max_read_batch))

    def _hash(self, info: EntryInfo) -> int:
        key = info.sticky_key
        value = self._hash_memo.get(key)
        if value is None:
            if len(self._hash_memo) >= _HASH_MEMO_MAX:
                self._hash_memo.clear()
            value = sticky_key_hash(key)
            self._hash_memo[key] = value
        return value

    def _hold(self, position: Position, key_hash: int) -> None:
        if position not in self._replay_hashes:
            self._replay_hashes[position] = key_hash
            self._held_hashes[key_hash] += 1
        self.to_redeliver.add(position)

    def add_replay(self, positions: list[Position]) -> None:
        """Queue positions for redelivery, holding back later messages of their keys. A
        position whose key is not known here (a delayed message now due) waits in
        ``unkeyed`` until the next pass reads its key, before any new entry goes out."""
        pending_hash = self._pending_hash
        for position in positions:
            if position in self._replay_hashes:
                self.to_redeliver.add(position)
                continue
            key_hash = pending_hash.get(position)
            if key_hash is None:
                self.unkeyed.add(position)
            else:
                self._hold(position, key_hash)

    async def read_keys(self) -> None:
        """Read the keys of replays that have none yet, and hold them back by key."""
        wanted = sorted(self.unkeyed)
        self.unkeyed.clear()
        epoch = self.epoch
        entries = await self.subscription.topic.ledger.replay_entries(wanted)
        if epoch != self.epoch:
            return  # reset meanwhile: the replays are forgotten
        infos = self.subscription.topic.entry_infos
        for entry in entries:
            self._hold(entry.position, self._hash(infos.get(entry.position, entry.data)))

    def discard_replay(self, position: Position) -> None:
        """Drop a position from redelivery; its key may flow again when none is left."""
        self.to_redeliver.discard(position)
        key_hash = self._replay_hashes.pop(position, None)
        if key_hash is not None:
            left = self._held_hashes[key_hash] - 1
            if left > 0:
                self._held_hashes[key_hash] = left
            else:
                del self._held_hashes[key_hash]

    def reset(self) -> None:
        """Forget the redelivery and key bookkeeping (after a rewind)."""
        self._replay_hashes.clear()
        self.unkeyed.clear()
        self._held_hashes.clear()
        self._draining.clear()
        self._pending_hash.clear()
        super().reset()

    def entry_done(self, position: Position) -> None:
        """An entry left its consumer (acked, handed back): its hash drains by one."""
        key_hash = self._pending_hash.pop(position, None)
        if key_hash is None:
            return
        slot = self._draining.get(key_hash)
        if slot is None:
            return
        left = slot[1] - 1
        if left > 0:
            self._draining[key_hash] = (slot[0], left)
        else:
            del self._draining[key_hash]
            if key_hash in self._held_hashes:
                self.schedule()

    # --- dispatching ----------------------------------------------------------------------------

    def assign(self, batch: list[tuple[Entry, EntryInfo]], replaying: bool) -> bool:
        """Send a batch of entries to their keys' consumers; False if none went."""
        plan: dict[int, tuple[Consumer, list[Dispatch]]] = {}
        blocked: set[int] = set()
        select = self.selector.select
        held = self._held_hashes
        for entry, info in batch:
            key_hash = self._hash(info)
            position = entry.position
            consumer = None
            if key_hash not in blocked and (replaying or key_hash not in held):
                consumer = select(key_hash)
            if consumer is not None and not consumer.allow_out_of_order:
                joined = self.recently_joined.get(consumer)
                drain = self._draining.get(key_hash)
                if (joined is not None and position >= joined) or (
                    drain is not None and drain[0] is not consumer
                ):
                    consumer = None
            if consumer is not None and not self.can_receive(consumer):
                consumer = None
            if consumer is None:
                blocked.add(key_hash)
                self._hold(position, key_hash)
                continue
            consumer.permits -= info.num_messages
            slot = plan.setdefault(id(consumer), (consumer, []))
            slot[1].append(self.prepared(consumer, entry, info))
            if position not in self._pending_hash:
                self._pending_hash[position] = key_hash
                drain = self._draining.get(key_hash)
                self._draining[key_hash] = (consumer, 1 if drain is None else drain[1] + 1)
        return self.send_plan(plan)
