"""Model-based crash testing: a seeded random walk against a real broker process.

A walk is a list of steps (plain tuples, so that a failing walk prints as a Python literal that
can be pasted into a regression test). The engine runs them with the official client against
``starquake standalone`` in a child process started with tiny ledgers, constant rollover and
trimming, and keeps a model of what the broker must hold:

* every send attempt carries a unique id in its payload; a send receipt fixes its message id;
* per durable subscription, the state of every message it holds: ``must`` (unacknowledged: it
  must be delivered again after a restart), ``opt`` (it may or may not be delivered: an ack
  that may not have been persisted, a batch only partly acknowledged, a message that could
  have been trimmed before the subscription reached it), ``acked`` (acknowledged in this broker
  session, at a known time) and ``done`` (acknowledged and surely persisted: never again);
* per message, whether it may have been trimmed (it was, at some point, before the mark-delete
  position of every durable subscription holding it).

Restarts are clean stops (the client is closed first, so that grouped acks are sent, and the
broker must exit 0) or kill -9; after every restart :meth:`CrashWalk.check` verifies the
invariants listed in the docstring of that method and raises :class:`Violation` on the first
one broken. :func:`shrink` reduces a failing walk by dropping steps while it still fails.
"""

from __future__ import annotations

import contextlib
import dataclasses
import random
import shutil
import threading
import time
from collections.abc import Callable, Iterator
from datetime import timedelta
from pathlib import Path
from typing import Any

import pulsar
from broker_process import BrokerProcess

Step = tuple[Any, ...]
Pos = tuple[int, int, int]  # ledger id, entry id, batch index (-1: not batched)

# The broker persists cursors every second; the client groups acks for 100 ms.
FLUSH_SECONDS = 1.0
ACK_MARGIN = 0.6
SUB_TYPES = {
    "Exclusive": pulsar.ConsumerType.Exclusive,
    "Shared": pulsar.ConsumerType.Shared,
    "Failover": pulsar.ConsumerType.Failover,
    "Key_Shared": pulsar.ConsumerType.KeyShared,
}
DELAY_TYPES = ("Shared", "Key_Shared")
SUB_NAMES = ("s0", "s1", "s2", "s3")
KEYS = ("k0", "k1", "k2", "k3", "k4")
DELAY_TICK_MS = 100
FAILOVER_WAIT_S = 1.0
"""The broker's default wait before a Failover subscription's new active consumer is served
(``activeConsumerFailoverDelayTimeMillis``): each check's consumers are subscribed anew."""
# Open broker bugs a walk steers around (by name, each with an xfail regression test in
# test_crash_regressions.py); none open now. Names the walk understands:
# - "cumulative-batch-index": with batch-index acks, a cumulative ack of a message in a batch
#   acknowledged the whole batch (fixed in 584a0a9); the walk then acks such messages
#   individually.
KNOWN_BUGS: frozenset[str] = frozenset()


class Violation(AssertionError):
    """An invariant the broker broke (or, while the model is young, a model mistake)."""

    def __init__(self, invariant: str, detail: str) -> None:
        super().__init__(f"[{invariant}] {detail}")
        self.invariant = invariant
        self.detail = detail


@dataclasses.dataclass(frozen=True)
class WalkConfig:
    """Broker settings of one walk."""

    seed: int
    topics: int = 3
    entries_per_ledger: int = 4
    dedup: bool = False
    batch_index_ack: bool = False
    commit_budget: int = 0  # bytes per group commit; 0: the broker's default
    # known broker bugs the walk steers around (see KNOWN_BUGS)
    avoid: frozenset[str] = frozenset()

    def defines(self) -> list[str]:
        return [
            f"managedLedgerMaxEntriesPerLedger={self.entries_per_ledger}",
            "managedLedgerMinLedgerRolloverTimeMinutes=0",
            "managedLedgerTrimIntervalSeconds=0.2",
            f"managedLedgerCursorPositionFlushSeconds={FLUSH_SECONDS:g}",
            f"brokerDeduplicationEnabled={str(self.dedup).lower()}",
            f"acknowledgmentAtBatchIndexLevelEnabled={str(self.batch_index_ack).lower()}",
            f"delayedDeliveryTickTimeMillis={DELAY_TICK_MS}",
            *(
                [f"journalBufferedWritesThreshold={self.commit_budget}"]
                if self.commit_budget
                else []
            ),
        ]

    @staticmethod
    def for_seed(seed: int, avoid: frozenset[str] = frozenset()) -> WalkConfig:
        """Settings from the seed: its three low bits choose deduplication, batch-index acks
        and group commits of a few entries (so that a commit is written while the one before
        it is fsynced, and a kill can fall between them)."""
        rng = random.Random(f"config-{seed}")
        return WalkConfig(
            seed=seed,
            topics=rng.choice((2, 3)),
            entries_per_ledger=rng.randint(3, 5),
            dedup=seed % 2 == 1,
            batch_index_ack=seed // 2 % 2 == 1,
            commit_budget=600 if seed // 4 % 2 == 1 else 0,
            avoid=avoid,
        )


@dataclasses.dataclass
class Stats:
    steps: int = 0
    restarts: int = 0
    kills: int = 0
    clean_stops: int = 0
    checks: int = 0
    messages: int = 0
    deliveries: int = 0
    anomalies: list[str] = dataclasses.field(default_factory=list)

    def add(self, other: Stats) -> None:
        for field in ("steps", "restarts", "kills", "clean_stops", "checks"):
            setattr(self, field, getattr(self, field) + getattr(other, field))
        self.messages += other.messages
        self.deliveries += other.deliveries
        self.anomalies += other.anomalies


# ---------------------------------------------------------------------------------- the model


@dataclasses.dataclass
class Sent:
    """One send attempt."""

    uid: int
    topic: int
    order: int  # send order on its topic (equals position order for stored messages)
    seq: int | None  # explicit sequence id (the dedup producer)
    key: str
    deliver_at: float | None  # wall-clock seconds (delayed messages)
    pos: Pos | None = None  # known once receipted, delivered or found by the scan
    receipted: bool = False
    gone: bool = False  # never stored, or trimmed
    trimmable: bool = False  # may have been trimmed
    resend: bool = False  # a dedup producer's deliberate re-send of a sequence id


@dataclasses.dataclass
class MsgState:
    status: str  # "must", "opt", "acked", "done"
    acked_at: float = 0.0


@dataclasses.dataclass
class SubModel:
    topic: int
    name: str
    kind: str
    state: dict[int, MsgState] = dataclasses.field(default_factory=dict)
    consumer: Any = None
    unacked: dict[int, Any] = dataclasses.field(default_factory=dict)  # uid -> pulsar.Message
    uncertain: bool = False  # created by a subscribe interrupted by kill -9
    last_pos: Pos | None = None  # ordering check for Exclusive/Failover after a restart


@dataclasses.dataclass
class TopicModel:
    index: int
    name: str
    log: list[int] = dataclasses.field(default_factory=list)  # uids of stored messages, by pos
    sent: int = 0
    marks: list[tuple[int, int]] = dataclasses.field(default_factory=list)  # (ms, send order)
    next_seq: int = 1  # the official client ignores an explicit sequence id of 0
    subs: dict[str, SubModel] = dataclasses.field(default_factory=dict)
    retired: set[str] = dataclasses.field(default_factory=set)


def _pos(mid: Any) -> Pos:
    return (mid.ledger_id(), mid.entry_id(), mid.batch_index())


def _payload(uid: int, seq: int | None) -> bytes:
    return f"cm:{uid}:{-1 if seq is None else seq}".encode()


def _uid(data: bytes) -> int | None:
    try:
        head, uid, _ = data.decode().split(":")
    except (UnicodeDecodeError, ValueError):
        return None
    return int(uid) if head == "cm" else None


# ---------------------------------------------------------------------------------- the walk


class CrashWalk:
    """Runs ``steps`` against a broker on ``workdir`` with the settings of ``config``."""

    def __init__(
        self,
        config: WalkConfig,
        steps: list[Step],
        workdir: Path,
        log: Callable[[str], None] | None = None,
    ) -> None:
        self.config = config
        self.steps = steps
        self.workdir = workdir
        self.say = log or (lambda _: None)
        self.stats = Stats()
        self.msgs: dict[int, Sent] = {}
        self.topics = [
            TopicModel(i, f"persistent://public/default/cm-t{i}") for i in range(config.topics)
        ]
        self.broker: BrokerProcess | None = None
        self.client: Any = None
        self.producers: dict[tuple[int, str], Any] = {}
        self.step_index = -1
        self._next_uid = 0
        self._kill_time = 0.0

    # ------------------------------------------------------------------ running

    def run(self) -> Violation | None:
        """Run every step, then a final kill -9 and check; the first violation, or None."""
        shutil.rmtree(self.workdir, ignore_errors=True)
        self.workdir.mkdir(parents=True)
        self.broker = BrokerProcess(self.workdir / "data", *self.config.defines())
        try:
            self.broker.start()
            self._new_client()
            for index, step in enumerate(self.steps):
                self.step_index = index
                self.stats.steps += 1
                getattr(self, f"_op_{step[0]}")(*step[1:])
            self.step_index = len(self.steps)
            self._op_restart("kill")
        except Violation as violation:
            return violation
        except pulsar.PulsarException as exc:
            return self._violation("client-error", f"{self.steps[self.step_index]!r}: {exc!r}")
        finally:
            self._close_client()
            self.broker.cleanup()
        return None

    def _make_client(self, operation_timeout: int = 5) -> Any:
        assert self.broker is not None
        return pulsar.Client(
            self.broker.url,
            operation_timeout_seconds=operation_timeout,
            logger=pulsar.FileLogger(pulsar.LoggerLevel.Warn, str(self.workdir / "client.log")),
        )

    def _new_client(self) -> None:
        self.client = self._make_client()
        self.producers = {}
        for topic in self.topics:
            for sub in topic.subs.values():
                sub.consumer = None
                sub.unacked = {}

    def _close_client(self) -> None:
        if self.client is not None:
            with contextlib.suppress(Exception):
                self.client.close()
            self.client = None

    def _violation(self, invariant: str, detail: str) -> Violation:
        return Violation(invariant, f"step {self.step_index}: {detail}")

    # ------------------------------------------------------------------ producers and sends

    def _producer(self, t: int, kind: str) -> Any:
        key = (t, kind)
        if key not in self.producers:
            name = self.topics[t].name
            if kind == "dedup":
                self.producers[key] = self.client.create_producer(
                    name,
                    producer_name=f"dedup-{t}",
                    batching_enabled=False,
                    send_timeout_millis=5000,
                )
            else:
                # "batch": batches closed by flush(); "fastbatch": a batch every 2 ms
                self.producers[key] = self.client.create_producer(
                    name,
                    batching_enabled=kind in ("batch", "fastbatch"),
                    batching_max_publish_delay_ms=2 if kind == "fastbatch" else 1000,
                    batching_max_messages=8,
                    send_timeout_millis=5000,
                )
        return self.producers[key]

    def _new_message(
        self, t: int, key: str, seq: int | None = None, deliver_at: float | None = None
    ) -> Sent:
        topic = self.topics[t]
        msg = Sent(self._next_uid, t, topic.sent, seq, key, deliver_at)
        self._next_uid += 1
        topic.sent += 1
        self.msgs[msg.uid] = msg
        self.stats.messages += 1
        # every existing subscription holds a message sent after it was created
        for sub in topic.subs.values():
            sub.state[msg.uid] = MsgState("must")
        return msg

    def _receipt(self, msg: Sent, mid: Any) -> None:
        pos = _pos(mid)
        if pos[0] < 0:
            raise self._violation("dedup", f"send of message {msg.uid} was dropped as a duplicate")
        msg.receipted = True
        self._place(msg, pos)

    def _place(self, msg: Sent, pos: Pos) -> None:
        """Record that ``msg`` is stored at ``pos``."""
        if msg.pos is not None:
            if msg.pos != pos:
                raise self._violation(
                    "2-ids", f"message {msg.uid} was at {msg.pos} and is now at {pos}"
                )
            return
        msg.pos = pos
        log = self.topics[msg.topic].log
        i = len(log)
        while i > 0 and self.msgs[log[i - 1]].pos > pos:  # type: ignore[operator]
            i -= 1
        log.insert(i, msg.uid)

    def _mark(self, t: int) -> None:
        """A publish-time mark between sends, for seeks by timestamp."""
        time.sleep(0.003)
        self.topics[t].marks.append((int(time.time() * 1000), self.topics[t].sent))
        time.sleep(0.003)

    def _op_send(self, t: int, kind: str, n: int, r: int) -> None:
        if t >= len(self.topics):
            return
        rng = random.Random(r)
        topic = self.topics[t]
        self._mark(t)
        producer = self._producer(t, kind)
        if kind in ("batch", "fastbatch"):
            self._send_async(producer, t, n, rng)
            return
        for _ in range(n):
            seq = None
            if kind == "dedup":
                seq = topic.next_seq
                topic.next_seq += 1
            msg = self._new_message(t, rng.choice(KEYS), seq)
            mid = producer.send(_payload(msg.uid, seq), partition_key=msg.key, sequence_id=seq)
            self._receipt(msg, mid)

    def _send_async(
        self, producer: Any, t: int, n: int, rng: random.Random, kill_after: int | None = None
    ) -> None:
        """Send ``n`` messages asynchronously; with ``kill_after``, kill -9 once that many
        receipts arrived (the rest have an unknown outcome)."""
        lock = threading.Lock()
        receipts: list[tuple[Sent, Any, Any]] = []
        enough = threading.Event()
        target = n if kill_after is None else kill_after

        def callback(msg: Sent) -> Callable[[Any, Any], None]:
            def done(result: Any, mid: Any) -> None:
                with lock:
                    receipts.append((msg, result, mid))
                    if len(receipts) >= target:
                        enough.set()

            return done

        if target == 0:
            enough.set()
        for _ in range(n):
            msg = self._new_message(t, rng.choice(KEYS))
            producer.send_async(_payload(msg.uid, None), callback(msg), partition_key=msg.key)
        if kill_after is None:
            producer.flush()
        enough.wait(10)
        if kill_after is not None:
            self._kill()
        with lock:
            got = list(receipts)
        for msg, result, mid in got:
            if result == pulsar.Result.Ok:
                self._receipt(msg, mid)
            elif kill_after is None:
                raise self._violation("send", f"send of {msg.uid} failed: {result}")
        if kill_after is not None:
            self._after_stop(killed=True)

    def _op_send_delayed(self, t: int, n: int, delay_ms: int, r: int) -> None:
        if t >= len(self.topics):
            return
        rng = random.Random(r)
        self._mark(t)
        producer = self._producer(t, "plain")
        for _ in range(n):
            deliver_at = time.time() + delay_ms / 1000
            msg = self._new_message(t, rng.choice(KEYS), deliver_at=deliver_at)
            mid = producer.send(
                _payload(msg.uid, None),
                partition_key=msg.key,
                deliver_after=timedelta(milliseconds=delay_ms),
            )
            self._receipt(msg, mid)

    # ------------------------------------------------------------------ subscriptions

    def _sub(self, t: int, name: str) -> SubModel | None:
        if t >= len(self.topics):
            return None
        return self.topics[t].subs.get(name)

    def _subscribe(self, sub: SubModel, earliest: bool, client: Any = None) -> Any:
        initial = pulsar.InitialPosition.Earliest if earliest else pulsar.InitialPosition.Latest
        return (client or self.client).subscribe(
            self.topics[sub.topic].name,
            sub.name,
            consumer_type=SUB_TYPES[sub.kind],
            initial_position=initial,
            negative_ack_redelivery_delay_ms=300,
            batch_index_ack_enabled=self.config.batch_index_ack,
            receiver_queue_size=50,
        )

    def _hold_stored(self, sub: SubModel, status_if_kept: str) -> None:
        """``sub`` now holds every stored message of its topic (an Earliest subscription)."""
        self._update_trimmable(sub.topic)
        for uid in self.topics[sub.topic].log:
            msg = self.msgs[uid]
            sub.state[uid] = MsgState("opt" if msg.trimmable else status_if_kept)

    def _op_subscribe(self, t: int, name: str, kind: str, earliest: bool) -> None:
        if t >= len(self.topics):
            return
        topic = self.topics[t]
        if name in topic.subs or name in topic.retired:
            return
        sub = SubModel(t, name, kind)
        if earliest:
            self._hold_stored(sub, "must")
        sub.consumer = self._subscribe(sub, earliest)
        topic.subs[name] = sub

    def _op_unsubscribe(self, t: int, name: str) -> None:
        sub = self._sub(t, name)
        if sub is None:
            return
        self._ensure_consumer(sub)
        sub.consumer.unsubscribe()
        del self.topics[t].subs[name]

    def _ensure_consumer(self, sub: SubModel) -> None:
        if sub.consumer is None:
            sub.consumer = self._subscribe(sub, earliest=sub.uncertain)
            sub.uncertain = False

    def _op_receive(self, t: int, name: str, n: int) -> None:
        sub = self._sub(t, name)
        if sub is None:
            return
        self._ensure_consumer(sub)
        for _ in range(n):
            try:
                msg = sub.consumer.receive(timeout_millis=30)
            except pulsar.Timeout:
                return
            self._delivered(sub, msg)

    def _drain_into(self, sub: SubModel, timeout: float) -> int:
        got = 0
        while True:
            try:
                msg = sub.consumer.receive(timeout_millis=int(timeout * 1000))
            except pulsar.Timeout:
                return got
            self._delivered(sub, msg)
            got += 1

    def _delivered(self, sub: SubModel, message: Any) -> None:
        """Check one delivery to ``sub`` against the model and record it."""
        self.stats.deliveries += 1
        uid = _uid(message.data())
        where = f"subscription {sub.name} ({sub.kind}) of topic {sub.topic}"
        if uid is None or uid not in self.msgs:
            raise self._violation("4-unknown", f"{where} got a message never sent: {message!r}")
        msg = self.msgs[uid]
        pos = _pos(message.message_id())
        if msg.topic != sub.topic:
            raise self._violation("4-unknown", f"{where} got message {uid} of topic {msg.topic}")
        self._place(msg, pos)
        state = sub.state.get(uid)
        if msg.gone or state is None:
            raise self._violation(
                "6-not-held",
                f"{where} got message {uid} at {pos}, which it does not hold "
                f"(gone={msg.gone}, trimmable={msg.trimmable})",
            )
        if state.status == "done":
            raise self._violation(
                "3-redelivered",
                f"{where} got message {uid} at {pos} again, acknowledged long before the restart",
            )
        if sub.kind in DELAY_TYPES and msg.deliver_at is not None:
            early = msg.deliver_at - time.time()
            if early > (DELAY_TICK_MS + 150) / 1000:
                raise self._violation(
                    "6-delay", f"{where} got delayed message {uid} {early:.3f}s early"
                )
        if sub.last_pos is not None and sub.kind in ("Exclusive", "Failover"):
            if pos <= sub.last_pos:
                raise self._violation(
                    "6-order", f"{where} got {uid} at {pos} after {sub.last_pos} (after restart)"
                )
            sub.last_pos = pos
        if state.status == "acked":
            self.stats.anomalies.append(f"{where}: {uid} delivered again in the session")
        state.status = "must"
        sub.unacked[uid] = message

    def _op_ack(self, t: int, name: str, how: str, r: int) -> None:
        sub = self._sub(t, name)
        if sub is None or sub.consumer is None or not sub.unacked:
            return
        rng = random.Random(r)
        now = time.monotonic()
        uids = list(sub.unacked)
        target = self.msgs[rng.choice(uids)]
        assert target.pos is not None
        if (
            "cumulative-batch-index" in self.config.avoid
            and self.config.batch_index_ack
            and target.pos[2] >= 0
        ):
            how = "individual"
        if how == "cumulative" and sub.kind in ("Exclusive", "Failover"):
            sub.consumer.acknowledge_cumulative(sub.unacked[target.uid])
            for uid, state in sub.state.items():
                pos = self.msgs[uid].pos
                if pos is not None and pos <= target.pos and state.status in ("must", "opt"):
                    state.status = "acked"
                    state.acked_at = now
                    sub.unacked.pop(uid, None)
            return
        chosen = [u for u in uids if rng.random() < 0.6] or [uids[0]]
        for uid in chosen:
            message = sub.unacked.pop(uid)
            if how == "nack":
                sub.consumer.negative_acknowledge(message)
            else:
                sub.consumer.acknowledge(message)
                sub.state[uid] = MsgState("acked", now)

    def _op_seek(self, t: int, name: str, by: str, r: int) -> None:
        sub = self._sub(t, name)
        if sub is None:
            return
        topic = self.topics[t]
        rng = random.Random(r)
        self._ensure_consumer(sub)
        # no wait for grouped acknowledgements: the official client sends the ones it holds
        # before SEEK on the same connection, and the broker applies a connection's commands
        # in order, so every ack made so far lands before the cursor moves
        self._update_trimmable(t)
        stored = [self.msgs[u] for u in topic.log]
        if by == "time":
            if not topic.marks:
                return
            ms, order = rng.choice(topic.marks)
            sub.consumer.seek(ms)

            def before(m: Sent) -> str:
                return "done" if m.order < order else "must"
        else:
            if not stored:
                return
            target = rng.choice(stored)
            assert target.pos is not None
            tpos = target.pos
            ledger, entry, index = tpos
            sub.consumer.seek(pulsar.MessageId(-1, ledger, entry, index))

            def before(m: Sent) -> str:
                assert m.pos is not None
                if m.pos[:2] < tpos[:2]:
                    return "done"
                return "opt" if m.pos < tpos else "must"

        sub.unacked = {}
        sub.state = {}
        for msg in stored:
            status = before(msg)
            if status == "must" and msg.trimmable:
                status = "opt"
            sub.state[msg.uid] = MsgState(status)

    # ------------------------------------------------------------------ readers

    def _op_read(self, t: int, start: str, r: int) -> None:
        if t >= len(self.topics):
            return
        topic = self.topics[t]
        rng = random.Random(r)
        self._update_trimmable(t)
        log = list(topic.log)
        start_pos: Pos = (-1, -1, -1)
        start_id = pulsar.MessageId.earliest
        if start == "id" and log:
            start_msg = self.msgs[rng.choice(log)]
            assert start_msg.pos is not None
            start_pos = start_msg.pos
            ledger, entry, index = start_pos
            start_id = pulsar.MessageId(-1, ledger, entry, index)
        got = self._read(topic, start_id)
        expected = [u for u in log if self.msgs[u].pos > start_pos]  # type: ignore[operator]
        self._compare_read(topic, expected, got, f"reader from {start_pos}")

    def _read(self, topic: TopicModel, start: Any) -> list[tuple[int, Pos]]:
        reader = self.client.create_reader(topic.name, start, receiver_queue_size=100)
        out = []
        try:
            while reader.has_message_available():
                message = reader.read_next(5000)
                uid = _uid(message.data())
                if uid is None or uid not in self.msgs:
                    raise self._violation(
                        "4-unknown", f"topic {topic.index} stores a message never sent: {message!r}"
                    )
                out.append((uid, _pos(message.message_id())))
        finally:
            reader.close()
        return out

    def _compare_read(
        self, topic: TopicModel, expected: list[int], got: list[tuple[int, Pos]], what: str
    ) -> None:
        """``got`` must be ``expected`` less some messages that may have been trimmed (and
        everything before a missing message may have been trimmed too)."""
        got_uids = [u for u, _ in got]
        kept = set(got_uids)
        if [u for u in expected if u in kept] != got_uids:
            raise self._violation(
                "2-readable",
                f"topic {topic.index}: {what} read {got}, the model expects "
                f"{[(u, self.msgs[u].pos) for u in expected]}",
            )
        missing = [i for i, u in enumerate(expected) if u not in kept]
        if missing and not all(self.msgs[u].trimmable for u in expected[: missing[-1] + 1]):
            bad = next(u for u in expected[: missing[-1] + 1] if not self.msgs[u].trimmable)
            raise self._violation(
                "2-readable",
                f"topic {topic.index}: {what} read {got}, missing {expected[missing[-1]]} though "
                f"message {bad} at {self.msgs[bad].pos} before it must be kept",
            )
        for uid, pos in got:
            if self.msgs[uid].pos != pos:
                raise self._violation(
                    "2-ids", f"{what}: message {uid} at {pos}, receipted at {self.msgs[uid].pos}"
                )

    # ------------------------------------------------------------------ trimming model

    def _update_trimmable(self, t: int) -> None:
        """Mark messages that lie before the mark-delete position of every subscription
        holding them (as far as acks sent so far go): the broker may trim them."""
        topic = self.topics[t]
        blocked = {name: False for name in topic.subs}
        for uid in topic.log:
            msg = self.msgs[uid]
            free = True
            for name, sub in topic.subs.items():
                state = sub.state.get(uid)
                if state is not None and state.status == "must":
                    blocked[name] = True
                if blocked[name]:
                    free = False
            if free:
                msg.trimmable = True

    # ------------------------------------------------------------------ restarts

    def _kill(self) -> None:
        assert self.broker is not None
        self.broker.kill()
        self._kill_time = time.monotonic()

    def _op_sleep(self, ms: int) -> None:
        time.sleep(ms / 1000)

    def _op_restart(self, mode: str) -> None:
        assert self.broker is not None
        if mode == "clean":
            self._close_client()
            self.broker.stop()
            self._after_stop(killed=False)
        else:
            self._kill()
            self._after_stop(killed=True)

    def _op_burst_kill(self, t: int, kind: str, n: int, r: int) -> None:
        if t >= len(self.topics):
            return
        rng = random.Random(r)
        self._mark(t)
        self._send_async(self._producer(t, kind), t, n, rng, kill_after=rng.randint(0, n // 2))

    def _op_kill_subscribing(self, t: int, name: str, kind: str, delay_us: int) -> None:
        """Subscribe (Earliest) and kill -9 the broker ``delay_us`` later.

        The subscribe runs on a client of its own with a short operation timeout: it fails
        soon after the kill (the official client's subscribe never returns once its client is
        closed under it).
        """
        if t >= len(self.topics):
            return
        topic = self.topics[t]
        if name in topic.subs or name in topic.retired:
            return
        sub = SubModel(t, name, kind)
        self._hold_stored(sub, "opt")
        result: list[Any] = []
        side = self._make_client(operation_timeout=1)

        def subscribe() -> None:
            try:
                result.append(self._subscribe(sub, earliest=True, client=side))
            except Exception as exc:
                result.append(exc)

        thread = threading.Thread(target=subscribe, daemon=True)
        thread.start()
        time.sleep(delay_us / 1e6)
        self._kill()
        thread.join(15)
        with contextlib.suppress(Exception):
            side.close()
        if result and not isinstance(result[0], Exception):
            self._hold_stored(sub, "must")  # subscribe answered: the subscription is stored
        else:
            sub.uncertain = True
        topic.subs[name] = sub
        self._after_stop(killed=True)

    def _op_unsubscribe_kill(self, t: int, name: str, wait_ms: int) -> None:
        """Unsubscribe, then kill -9 ``wait_ms`` after it returned (with -1: while it runs).

        An unsubscribe cut off by the kill has an unknown outcome, whatever the client says:
        the official client reports success when the connection drops before the answer.
        """
        sub = self._sub(t, name)
        if sub is None:
            return
        self._ensure_consumer(sub)
        result: list[Any] = []

        def unsubscribe() -> None:
            try:
                sub.consumer.unsubscribe()
                result.append(True)
            except Exception as exc:
                result.append(exc)

        thread = threading.Thread(target=unsubscribe, daemon=True)
        thread.start()
        if wait_ms >= 0:
            thread.join(10)
            time.sleep(wait_ms / 1000)
        self._kill()
        self._close_client()
        thread.join(2)
        del self.topics[t].subs[name]
        if wait_ms < 0 or result != [True]:
            self.topics[t].retired.add(name)  # it may or may not exist now
        self._after_stop(killed=True)

    def _settle_acks(self, killed: bool) -> None:
        """Turn the session's acks into ``done`` (surely persisted) or ``opt`` (maybe lost).

        Without batch-index acks, a batch entry counts as acknowledged only once every message
        in it is; until then the whole batch is delivered again.
        """
        limit = (self._kill_time - FLUSH_SECONDS - ACK_MARGIN) if killed else float("inf")
        for topic in self.topics:
            for sub in topic.subs.values():

                def persisted(state: MsgState) -> bool:
                    return state.status == "done" or (
                        state.status == "acked" and state.acked_at <= limit
                    )

                entries: dict[tuple[int, int], list[MsgState]] = {}
                for uid, state in sub.state.items():
                    pos = self.msgs[uid].pos
                    if pos is not None:
                        entries.setdefault(pos[:2], []).append(state)
                verdict: dict[int, bool] = {}
                for uid, state in sub.state.items():
                    if state.status != "acked":
                        continue
                    pos = self.msgs[uid].pos
                    assert pos is not None
                    group = [state] if self.config.batch_index_ack else entries[pos[:2]]
                    verdict[uid] = all(persisted(s) for s in group)
                for uid, sure in verdict.items():
                    sub.state[uid].status = "done" if sure else "opt"

    def _after_stop(self, killed: bool) -> None:
        """The broker is down: restart it on the same data and check every invariant."""
        assert self.broker is not None
        self._close_client()
        self.stats.restarts += 1
        if killed:
            self.stats.kills += 1
        else:
            self.stats.clean_stops += 1
        self._settle_acks(killed)
        try:
            self.broker.start()
        except RuntimeError as exc:
            raise self._violation("1-start", f"broker did not start: {exc}") from None
        self._new_client()
        self.check()

    # ------------------------------------------------------------------ invariants

    def check(self) -> None:
        """Check every invariant after a restart.

        1. every topic loads (a reader and every subscription attach within the timeout);
        2. the stored log, read from the earliest, holds every receipted message at its
           receipted id, in order; a receipted message is missing only if it may have been
           trimmed, and so may every message before it;
        3. (on delivery) nothing acknowledged well before a kill -9, or before a clean stop, is
           delivered again;
        4. nothing stored or delivered was never sent;
        5. with deduplication, no sequence id of the dedup producer is stored twice, the broker
           remembers the last one, and re-sends of the last few are dropped;
        6. every subscription gets exactly its unacknowledged messages (plus those whose ack may
           have been lost), delayed ones included, in order for Exclusive and Failover.
        """
        for topic in self.topics:
            self._check_log(topic)
        if self.config.dedup:
            for topic in self.topics:
                self._check_dedup(topic)
        self._check_subscriptions()

    def _check_log(self, topic: TopicModel) -> None:
        self.stats.checks += 1
        self._update_trimmable(topic.index)
        try:
            got = self._read(topic, pulsar.MessageId.earliest)
        except pulsar.PulsarException as exc:
            raise self._violation("1-load", f"topic {topic.index} did not load: {exc!r}") from None
        seen: dict[int, Pos] = {}
        seqs: set[int] = set()
        last: Pos | None = None
        for uid, pos in got:
            msg = self.msgs[uid]
            if last is not None and pos <= last:
                raise self._violation("2-order", f"topic {topic.index}: {pos} after {last}")
            last = pos
            if msg.topic != topic.index:
                raise self._violation("4-unknown", f"message {uid} stored on topic {topic.index}")
            if uid in seen and (self.config.dedup or msg.receipted):
                raise self._violation(
                    "5-duplicate", f"topic {topic.index} stores message {uid} twice"
                )
            seen.setdefault(uid, pos)
            if msg.seq is not None and self.config.dedup:
                if msg.seq in seqs:
                    raise self._violation(
                        "5-duplicate", f"topic {topic.index} stores sequence id {msg.seq} twice"
                    )
                seqs.add(msg.seq)
            if msg.resend and self.config.dedup:
                raise self._violation(
                    "5-duplicate", f"topic {topic.index} stored the re-send {uid} (seq {msg.seq})"
                )
            if msg.gone:
                raise self._violation(
                    "2-readable", f"topic {topic.index}: message {uid} is back at {pos}"
                )
            if msg.receipted and msg.pos != pos:
                raise self._violation(
                    "2-ids", f"message {uid} receipted at {msg.pos} is stored at {pos}"
                )
        # unreceipted sends: stored (now known) or lost for good
        for msg in self.msgs.values():
            if msg.topic == topic.index and msg.pos is None and not msg.gone:
                if msg.uid in seen:
                    self._place(msg, seen[msg.uid])
                else:
                    msg.gone = True
                    for sub in topic.subs.values():
                        sub.state.pop(msg.uid, None)
        missing = [u for u in topic.log if u not in seen]
        for uid in missing:
            msg = self.msgs[uid]
            if not msg.trimmable:
                raise self._violation(
                    "2-lost",
                    f"topic {topic.index}: message {uid} at {msg.pos} "
                    f"(receipted={msg.receipted}) is missing though a subscription holds it; "
                    f"read {len(got)} messages from {got[0][1] if got else None}",
                )
        if missing:
            last_missing = self.msgs[missing[-1]].pos
            for uid in topic.log:
                msg = self.msgs[uid]
                if msg.pos < last_missing and not msg.trimmable:  # type: ignore[operator]
                    raise self._violation(
                        "2-suffix",
                        f"topic {topic.index}: message {uid} at {msg.pos} is kept but "
                        f"{missing[-1]} at {last_missing} after it is missing",
                    )
        for uid in missing:
            self.msgs[uid].gone = True
            topic.log.remove(uid)
            for sub in topic.subs.values():
                sub.state.pop(uid, None)

    def _check_dedup(self, topic: TopicModel) -> None:
        mine = [m for m in self.msgs.values() if m.topic == topic.index and m.seq is not None]
        if not mine:
            return
        self.stats.checks += 1
        producer = self._producer(topic.index, "dedup")
        last = producer.last_sequence_id()
        receipted = [m.seq for m in mine if m.receipted and not m.resend]
        stored = [m.seq for m in mine if m.pos is not None and not m.resend]
        floor = max(receipted + stored, default=-1)
        if last < floor:  # type: ignore[operator]
            raise self._violation(
                "5-forgotten",
                f"topic {topic.index}: the broker's last sequence id of the dedup producer is "
                f"{last}, but sequence id {floor} is stored",
            )
        if last >= topic.next_seq:
            raise self._violation(
                "5-forgotten", f"topic {topic.index}: last sequence id {last} was never sent"
            )
        # re-send the last few stored sequence ids: each must be dropped as a duplicate
        again = sorted({m.seq for m in mine if m.seq is not None and m.seq <= last})[-3:]
        for seq in again:
            msg = self._new_message(topic.index, "k0", seq)
            msg.resend = True
            mid = producer.send(_payload(msg.uid, seq), partition_key=msg.key, sequence_id=seq)
            msg.gone = True
            for sub in topic.subs.values():
                sub.state.pop(msg.uid, None)
            if mid.ledger_id() >= 0:
                raise self._violation(
                    "5-duplicate",
                    f"topic {topic.index}: re-send of sequence id {seq} was stored at {_pos(mid)}",
                )
        topic.next_seq = max(topic.next_seq, last + 1)

    def _check_subscriptions(self) -> None:
        subs = [sub for topic in self.topics for sub in topic.subs.values()]
        for sub in subs:
            self.stats.checks += 1
            try:
                self._ensure_consumer(sub)
            except pulsar.PulsarException as exc:
                raise self._violation(
                    "1-load", f"subscription {sub.name} on topic {sub.topic}: {exc!r}"
                ) from None
            sub.last_pos = (-1, -1, -1)
        # a Failover subscription's consumer is served once the broker's wait after it became
        # active is over
        served_from = time.monotonic() + (
            FAILOVER_WAIT_S if any(sub.kind == "Failover" for sub in subs) else 0.0
        )
        # receive until every subscription was quiet for a while and delayed messages are due
        due = max(
            (
                self.msgs[u].deliver_at or 0.0
                for sub in subs
                if sub.kind in DELAY_TYPES
                for u, s in sub.state.items()
                if s.status in ("must", "opt")
            ),
            default=0.0,
        )
        quiet_since = time.monotonic()
        while True:
            got = 0
            for sub in subs:
                got += self._drain_into(sub, 0.01)
            now = time.monotonic()
            if got:
                quiet_since = now
            elif now - max(quiet_since, served_from) > 0.5 and time.time() > due + 0.3:
                break
            if now - quiet_since > 20:
                break
        for sub in subs:
            sub.last_pos = None
            missing = [
                (u, self.msgs[u].pos)
                for u, s in sub.state.items()
                if s.status == "must" and u not in sub.unacked
            ]
            if missing:
                raise self._violation(
                    "6-undelivered",
                    f"subscription {sub.name} ({sub.kind}) of topic {sub.topic} did not get "
                    f"{len(missing)} unacknowledged message(s) after the restart: {missing[:10]}",
                )
            # whatever may have been acked and was not delivered again is acked
            for uid, state in sub.state.items():
                if state.status == "opt" and uid not in sub.unacked:
                    state.status = "done"


# ---------------------------------------------------------------------------------- generation


def generate(seed: int, config: WalkConfig, restarts: int = 10) -> list[Step]:
    """A random walk of about ``restarts`` restarts, reproducible from ``seed``."""
    rng = random.Random(seed)
    steps: list[Step] = []
    names: dict[int, dict[str, str]] = {t: {} for t in range(config.topics)}
    done = 0

    def pick_sub() -> tuple[int, str] | None:
        live = [(t, n) for t in names for n in names[t]]
        return rng.choice(live) if live else None

    while done < restarts:
        t = rng.randrange(config.topics)
        roll = rng.random()
        r = rng.randrange(1 << 30)
        if roll < 0.12:
            free = [n for n in SUB_NAMES if n not in names[t]]
            if free:
                name = rng.choice(free)
                kind = rng.choice(list(SUB_TYPES))
                names[t][name] = kind
                steps.append(("subscribe", t, name, kind, rng.random() < 0.6))
                continue
        if roll < 0.35:
            kind = rng.choice(("plain", "batch", "dedup"))
            steps.append(("send", t, kind, rng.randint(1, 8), r))
        elif roll < 0.40:
            steps.append(("send_delayed", t, rng.randint(1, 3), rng.choice((50, 200, 500)), r))
        elif roll < 0.55:
            picked = pick_sub()
            if picked:
                steps.append(("receive", *picked, rng.randint(1, 12)))
        elif roll < 0.68:
            picked = pick_sub()
            if picked:
                how = rng.choice(("individual", "individual", "cumulative", "nack"))
                steps.append(("ack", *picked, how, r))
        elif roll < 0.72:
            picked = pick_sub()
            if picked:
                steps.append(("seek", *picked, rng.choice(("id", "time")), r))
        elif roll < 0.75:
            picked = pick_sub()
            if picked:
                names[picked[0]].pop(picked[1])
                steps.append(("unsubscribe", *picked))
        elif roll < 0.79:
            steps.append(("read", t, rng.choice(("earliest", "id")), r))
        elif roll < 0.84:
            steps.append(("sleep", rng.choice((100, 600, 1200, 2000))))
        else:
            done += 1
            what = rng.random()
            if what < 0.3:
                steps.append(("restart", "clean"))
            elif what < 0.55:
                steps.append(("restart", "kill"))
            elif what < 0.8:
                kind = rng.choice(("plain", "fastbatch"))
                steps.append(("burst_kill", t, kind, rng.randint(5, 40), r))
            elif what < 0.9:
                free = [n for n in SUB_NAMES if n not in names[t]]
                if free:
                    name = rng.choice(free)
                    kind = rng.choice(list(SUB_TYPES))
                    names[t][name] = kind
                    steps.append(("kill_subscribing", t, name, kind, rng.randint(0, 3000)))
                else:
                    steps.append(("restart", "kill"))
            else:
                picked = pick_sub()
                if picked:
                    names[picked[0]].pop(picked[1])
                    steps.append(("unsubscribe_kill", *picked, rng.choice((-1, 0, 0, 5, 50))))
                else:
                    steps.append(("restart", "kill"))
    return steps


def run_walk(
    config: WalkConfig,
    steps: list[Step],
    workdir: Path,
    log: Callable[[str], None] | None = None,
) -> tuple[Violation | None, Stats]:
    walk = CrashWalk(config, steps, workdir, log)
    violation = walk.run()
    return violation, walk.stats


def shrink(
    config: WalkConfig,
    steps: list[Step],
    workdir: Path,
    deadline: float,
    same: Callable[[Violation], bool] | None = None,
) -> list[Step]:
    """Drop steps (halves, quarters, ... single steps) while the walk still fails."""

    def fails(candidate: list[Step]) -> bool:
        violation, _ = run_walk(config, candidate, workdir)
        return violation is not None and (same is None or same(violation))

    chunk = max(len(steps) // 2, 1)
    while chunk >= 1 and time.monotonic() < deadline:
        i = 0
        while i < len(steps) and time.monotonic() < deadline:
            candidate = steps[:i] + steps[i + chunk :]
            if candidate != steps and fails(candidate):
                steps = candidate
            else:
                i += chunk
        chunk //= 2
    return steps


def describe(config: WalkConfig, steps: list[Step]) -> str:
    """A failing walk as Python source for a regression test."""
    lines = [f"config = {config!r}", "steps = ["]
    lines += [f"    {step!r}," for step in steps]
    lines.append("]")
    return "\n".join(lines)


@contextlib.contextmanager
def scratch(base: Path, name: str) -> Iterator[Path]:
    path = base / name
    try:
        yield path
    finally:
        shutil.rmtree(path, ignore_errors=True)
