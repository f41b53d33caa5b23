"""A seeded kill -9 campaign against a broker process with transactions on.

Worker threads run transactions concurrently: each takes an input message from one or two
Shared subscriptions, sends one message to each of two or three output topics (one of them
partitioned), acknowledges the inputs in the transaction and commits (a share of them abort
instead). Meanwhile the broker is killed with SIGKILL at random moments of the transactions'
lives (just before a send, just before or during a commit or an abort, right after a commit is
answered, at a random moment, with every worker idle) and also while it restarts and recovers;
each time it is started again on the same data. Transactions cut by a crash end at their short
timeout. At the end, :mod:`txn_campaign_check` checks what the broker kept.

Used by the suite (a few kill points) and by ``bench/txn_kill_campaign.py`` (30 and more).
"""

from __future__ import annotations

import contextlib
import random
import subprocess
import threading
import time
import uuid
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from admin_http import admin_json, http_call
from broker_process import BrokerProcess
from delivery_watch import DeliveryWatcher
from parent_watch import dies_with_parent
from txn_campaign_check import ABORTED, COMMITTED, Ledger, Observed, TxnRecord, Verdict, check

from starquake import client as pulsar

TXN_TIMEOUT_MS = 4000
"""Short: transactions cut by a crash end (abort) soon after the restart."""
OPERATION_TIMEOUT_S = 10
KINDS = ("send", "commit", "abort", "committed", "random", "idle")
"""Where a kill point lands (besides "recovery": while the broker restarts)."""
RECOVERY_SHARE = 0.25
"""How often a restart is itself cut by a kill (a kill point of kind "recovery")."""
ABORT_SHARE = 0.2
"""How often a worker aborts its transaction instead of committing it."""
SHARED = pulsar.ConsumerType.Shared
EARLIEST = pulsar.InitialPosition.Earliest


@dataclass
class CampaignResult:
    """The figures of one campaign."""

    points: Counter[str] = field(default_factory=Counter)
    """Kill points by kind."""
    verdict: Verdict = field(default_factory=Verdict)
    errors: Counter[str] = field(default_factory=Counter)
    """Client errors the workers met, by type (expected around kills)."""

    def summary(self) -> str:
        kinds = ", ".join(f"{k} {n}" for k, n in sorted(self.points.items()))
        return f"{sum(self.points.values())} kill points ({kinds}); {self.verdict.summary()}"


class Hooks:
    """Where workers are in their transactions; the killer waits for an armed moment."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._armed: str | None = None
        self.hit = threading.Event()

    def arm(self, kind: str) -> None:
        with self._lock:
            self.hit.clear()
            self._armed = kind

    def reached(self, kind: str) -> None:
        with self._lock:
            if self._armed == kind:
                self._armed = None
                self.hit.set()

    def disarm(self) -> None:
        with self._lock:
            self._armed = None


class CampaignBroker(BrokerProcess):
    """A broker process that can also be launched without waiting (to kill it mid-start)."""

    def launch(self) -> None:
        """Start the broker process again on its ports and return at once."""
        with open(self.log_path, "ab") as out:
            self.proc = subprocess.Popen(
                self.command(), stdout=out, stderr=subprocess.STDOUT, preexec_fn=dies_with_parent()
            )


class Topics:
    """The campaign's topics (fresh names)."""

    def __init__(self) -> None:
        tag = uuid.uuid4().hex[:8]
        base = "persistent://public/default/camp-" + tag
        self.outputs = [f"{base}-out-a", f"{base}-out-b", f"{base}-out-p"]
        self.inputs = [f"{base}-in-a", f"{base}-in-p"]
        self.partitions = {f"{base}-out-p": 3, f"{base}-in-p": 2}

    def partition_names(self, topic: str) -> list[str]:
        count = self.partitions.get(topic, 0)
        return [f"{topic}-partition-{i}" for i in range(count)] if count else [topic]

    def create(self, broker: BrokerProcess) -> None:
        for topic, count in self.partitions.items():
            path = f"/admin/v2/{topic.replace('://', '/')}/partitions"
            status, body = http_call(broker.web_service_url, "PUT", path, count)
            assert status in (200, 204), (status, body)


def _client(url: str) -> pulsar.Client:
    return pulsar.Client(
        url, enable_transaction=True, operation_timeout_seconds=OPERATION_TIMEOUT_S
    )


class Worker(threading.Thread):
    """Runs transactions until told to stop (see the module docstring)."""

    def __init__(self, index: int, campaign: Campaign) -> None:
        super().__init__(name=f"txn-worker-{index}", daemon=True)
        self.index = index
        self.campaign = campaign
        self.rng = random.Random(campaign.seed * 100 + index)
        self.idle = threading.Event()
        self.count = 0

    def run(self) -> None:
        camp = self.campaign
        client = _client(camp.broker.url)
        try:
            producers, consumers = self._handles(client)
            while not camp.stopping.is_set():
                if not camp.gate.is_set():
                    self.idle.set()
                    camp.gate.wait()
                    self.idle.clear()
                    continue
                try:
                    self._one(client, producers, consumers)
                except pulsar.PulsarException as exc:
                    camp.errors[type(exc).__name__] += 1
                    time.sleep(0.2)
                time.sleep(self.rng.uniform(0, 0.03))
        finally:
            self.idle.set()
            with contextlib.suppress(Exception):
                client.close()

    def _handles(
        self, client: pulsar.Client
    ) -> tuple[list[tuple[str, pulsar.Producer]], list[pulsar.Consumer]]:
        camp = self.campaign
        while True:
            try:
                producers = [
                    (t, client.create_producer(t, send_timeout_millis=15_000))
                    for t in camp.topics.outputs
                ]
                consumers = [
                    client.subscribe(
                        t,
                        "work",
                        SHARED,
                        negative_ack_redelivery_delay_ms=300,
                        initial_position=EARLIEST,
                        receiver_queue_size=10,
                        batch_index_ack_enabled=True,
                    )
                    for t in camp.topics.inputs
                ]
                return producers, consumers
            except pulsar.PulsarException:
                time.sleep(0.3)

    def _one(
        self,
        client: pulsar.Client,
        producers: list[tuple[str, pulsar.Producer]],
        consumers: list[pulsar.Consumer],
    ) -> None:
        camp, rng = self.campaign, self.rng
        txn = client.new_transaction(timeout_ms=TXN_TIMEOUT_MS)
        record = TxnRecord(f"w{self.index}-{self.count}", txn.txn_id)
        self.count += 1
        camp.ledger.add(record)
        taken: list[tuple[pulsar.Consumer, pulsar.Message]] = []
        try:
            for consumer in rng.sample(consumers, rng.choice((1, 2))):
                with contextlib.suppress(pulsar.Timeout):
                    taken.append((consumer, consumer.receive(300)))
            camp.hooks.reached("send")
            for topic, producer in rng.sample(producers, rng.choice((2, 3))):
                payload = f"{camp.tag}|{record.key}|{topic.rsplit('-', 1)[-1]}".encode()
                record.sent.append((topic, payload))
                producer.send(payload, txn=txn)
            for consumer, msg in taken:
                record.acked.append(msg.data())
                consumer.acknowledge(msg, txn=txn)
            if rng.random() < ABORT_SHARE:
                camp.hooks.reached("abort")
                txn.abort()
                record.answer = ABORTED
            else:
                camp.hooks.reached("commit")
                txn.commit()
                record.answer = COMMITTED
                camp.hooks.reached("committed")
        except pulsar.PulsarException as exc:
            record.note = f", {type(exc).__name__} in state {txn.state}"
            if txn.state == "OPEN":
                with contextlib.suppress(pulsar.PulsarException):
                    txn.abort()
            if txn.state == "ABORTED":
                record.answer = ABORTED
            raise
        finally:
            if record.answer != COMMITTED:
                for consumer, msg in taken:  # delivered again (if not held in a transaction)
                    with contextlib.suppress(pulsar.PulsarException):
                        consumer.negative_acknowledge(msg)


class Audit(DeliveryWatcher):
    """Consumes the output topics for the whole campaign: every delivery is noted."""

    def __init__(self, campaign: Campaign) -> None:
        client = _client(campaign.broker.url)
        consumer = client.subscribe(campaign.topics.outputs, "audit", initial_position=EARLIEST)
        super().__init__("txn-audit", client, consumer)


class Campaign:
    """One campaign: ``points`` kill points from ``seed`` with ``workers`` worker threads."""

    def __init__(
        self,
        data_dir: Path,
        points: int,
        seed: int,
        workers: int = 3,
        inputs: int | None = None,
        say: Callable[[str], None] = lambda _: None,
        batched_inputs: bool | None = None,
    ) -> None:
        """``batched_inputs``: the partitioned input topic holds batches (acknowledged by
        batch index in the transactions); None: on odd seeds."""
        self.points, self.seed, self.say = points, seed, say
        self.batched = seed % 2 == 1 if batched_inputs is None else batched_inputs
        self.rng = random.Random(seed)
        self.tag = f"s{seed}"
        self.broker = CampaignBroker(
            data_dir,
            "transactionCoordinatorEnabled=true",
            "brokerDeduplicationEnabled=true",
            "acknowledgmentAtBatchIndexLevelEnabled=true",
        )
        self.topics = Topics()
        self.ledger = Ledger()
        self.hooks = Hooks()
        self.gate = threading.Event()
        self.gate.set()
        self.stopping = threading.Event()
        self.errors: Counter[str] = Counter()
        self.inputs_per_topic = inputs if inputs is not None else max(200, 40 * points)
        self.workers = [Worker(i, self) for i in range(workers)]
        self.result = CampaignResult(errors=self.errors)

    def run(self) -> CampaignResult:
        broker = self.broker
        started = time.monotonic()
        broker.start(timeout=60)
        start_seconds = time.monotonic() - started
        try:
            self.topics.create(broker)
            input_payloads = self._fill_inputs()
            audit = Audit(self)
            audit.start()
            for worker in self.workers:
                worker.start()
            self._kill_points(start_seconds)
            time.sleep(1.0)  # some transactions after the last restart too
            self.stopping.set()
            self.gate.set()
            for worker in self.workers:
                worker.join(120)
            observed = self._observe(audit, input_payloads)
        finally:
            self.stopping.set()
            self.gate.set()
            broker.cleanup()
        self.result.verdict = check(self.ledger.records, observed)
        return self.result

    def _fill_inputs(self) -> set[bytes]:
        client = _client(self.broker.url)
        payloads = set()
        failed: list[object] = []

        def sent(result: object, _: object) -> None:
            if result != pulsar.Result.Ok:
                failed.append(result)

        try:
            for topic in self.topics.inputs:
                producer = client.create_producer(
                    topic,
                    batching_enabled=self.batched and topic in self.topics.partitions,
                    batching_max_messages=4,
                    block_if_queue_full=True,
                )
                label = topic.rsplit("-", 2)[-2:]
                for n in range(self.inputs_per_topic):
                    payload = f"in|{'-'.join(label)}|{n}".encode()
                    payloads.add(payload)
                    producer.send_async(payload, sent)
                producer.flush()
            assert not failed, failed
        finally:
            client.close()
        return payloads

    # --- kills --------------------------------------------------------------------------------

    def _kill_points(self, start_seconds: float) -> None:
        rng, points = self.rng, self.result.points
        while sum(points.values()) < self.points:
            time.sleep(rng.uniform(0.3, 1.5))
            kind = rng.choice(KINDS)
            if kind in ("send", "commit", "abort", "committed"):
                self.hooks.arm(kind)
                if not self.hooks.hit.wait(20):
                    kind = "random"  # nothing reached it: a kill at a random moment then
                self.hooks.disarm()
                time.sleep(rng.uniform(0, 0.02))
            elif kind == "idle":
                self.gate.clear()
                for worker in self.workers:
                    worker.idle.wait(60)
            else:
                time.sleep(rng.uniform(0, 0.3))
            self.broker.kill()
            points[kind] += 1
            self.say(f"kill point {sum(points.values())}: {kind}")
            while sum(points.values()) < self.points and rng.random() < RECOVERY_SHARE:
                self.broker.launch()  # cut while it starts, replays its logs, loads topics
                time.sleep(rng.uniform(0.3 * start_seconds, start_seconds + 0.8))
                if not self.broker.running:
                    raise RuntimeError(f"broker exited on its own:\n{self.broker.log()[-3000:]}")
                self.broker.kill()
                points["recovery"] += 1
                self.say(f"kill point {sum(points.values())}: recovery")
            self.broker.start(timeout=60)
            self.gate.set()

    # --- the end ------------------------------------------------------------------------------

    def _wait_ended(self) -> None:
        """Until the coordinator has no transaction left (they end at their timeout)."""
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline:
            status, body = admin_json(self.broker, "GET", "/admin/v3/transactions/coordinators/0")
            if status == 200 and body["ongoingTxnSize"] == 0:
                return
            time.sleep(0.25)
        raise AssertionError(f"transactions still ongoing: {body}")

    def _observe(self, audit: Audit, input_payloads: set[bytes]) -> Observed:
        self._wait_ended()
        client = _client(self.broker.url)
        try:
            sentinels = set()
            for topic in self.topics.outputs + self.topics.inputs:
                for name in self.topics.partition_names(topic):
                    payload = f"sentinel|{name}".encode()
                    client.create_producer(name).send(payload)
                    sentinels.add(payload)
            deadline = time.monotonic() + 60
            outputs = {
                f"sentinel|{n}".encode()
                for t in self.topics.outputs
                for n in self.topics.partition_names(t)
            }
            while not outputs <= audit.delivered and time.monotonic() < deadline:
                time.sleep(0.1)
            audit.close()
            stored: dict[str, list[bytes]] = {}
            for topic in self.topics.outputs:
                got = stored.setdefault(topic, [])
                for name in self.topics.partition_names(topic):
                    got.extend(_read_to_sentinel(client, name))
            remaining = _drain(client, self.topics.inputs, sentinels)
        finally:
            client.close()
        return Observed(stored, audit.delivered - outputs, input_payloads, remaining)


def _read_to_sentinel(client: pulsar.Client, topic: str) -> list[bytes]:
    """Every payload of ``topic`` from the earliest, up to its sentinel (not included)."""
    reader = client.create_reader(topic, pulsar.MessageId.earliest)
    got = []
    try:
        while True:
            data = reader.read_next(30_000).data()
            if data == f"sentinel|{topic}".encode():
                return got
            got.append(data)
    finally:
        reader.close()


def _drain(client: pulsar.Client, topics: list[str], sentinels: set[bytes]) -> list[bytes]:
    """The input messages the work subscription still delivers (acknowledged here)."""
    consumer = client.subscribe(topics, "work", SHARED, batch_index_ack_enabled=True)
    wanted = {s for s in sentinels if any(s.startswith(f"sentinel|{t}".encode()) for t in topics)}
    seen_sentinels: set[bytes] = set()
    got: list[bytes] = []
    while True:
        try:
            msg = consumer.receive(30_000 if seen_sentinels != wanted else 1500)
        except pulsar.Timeout:
            if seen_sentinels == wanted:
                break
            raise AssertionError(f"input sentinels missing: {wanted - seen_sentinels}") from None
        consumer.acknowledge(msg)
        if msg.data() in wanted:
            seen_sentinels.add(msg.data())
        else:
            got.append(msg.data())
    consumer.close()
    return got
