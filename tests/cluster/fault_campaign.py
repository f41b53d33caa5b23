"""A fault campaign against a cluster: JetStream nodes (3 copies of every entry) and broker
processes under load from the official client, while a random broker or node is killed with
kill -9 at random moments, one at a time, and started again.

The load (one thread each, every client given all brokers' URLs):

- producers on a non-partitioned topic, a second one and a partitioned topic (keyed), each
  sending ``<producer>|<sequence>`` payloads and remembering which sends got a receipt;
- a producer with a fixed name on a topic of a namespace with deduplication on, giving
  explicit sequence ids and sending a failed one again until it gets a receipt;
- a Shared, a Failover, a Key_Shared and an Exclusive subscription acknowledging what they
  receive.

After each fault it measures how long until every topic takes a send again (a new producer
through the service URL). At the end (every process running again, the load stopped) it checks
what the cluster promises: every receipted message is stored (0 lost), each producer's messages
are stored in the order it sent them (0 reordered), the deduplicated topic holds each sequence
id once (0 duplicates), and every subscription received every receipted message.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import random
import threading
import time
import uuid
from collections import Counter, defaultdict
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path

import nats
import pulsar
from admin_http import admin_json
from broker_process import BrokerProcess, multi_host_url

from starquake.cluster.nodes import JetStreamNode, jetstream_nodes

PARTITIONS = 4
PLAIN = ("plain-0", "plain-1")
PARTITIONED = "parts"
DEDUP_NAMESPACE = "public/dedup"
SUBSCRIPTIONS = {
    "plain-0": pulsar.ConsumerType.Shared,
    "plain-1": pulsar.ConsumerType.Failover,
    PARTITIONED: pulsar.ConsumerType.KeyShared,
    "dedup": pulsar.ConsumerType.Exclusive,
}


def _quiet_client(url: str, timeout: int = 30) -> pulsar.Client:
    return pulsar.Client(
        url,
        operation_timeout_seconds=timeout,
        logger=pulsar.ConsoleLogger(pulsar.LoggerLevel.Error),
    )


@dataclass
class Report:
    """What one campaign found."""

    faults: list[str] = field(default_factory=list)
    reachable_after: list[float] = field(default_factory=list)
    """Seconds from each fault until every topic took a send again."""
    receipted: int = 0
    lost: list[str] = field(default_factory=list)
    reordered: list[str] = field(default_factory=list)
    duplicated: list[str] = field(default_factory=list)
    undelivered: list[str] = field(default_factory=list)
    errors: list[str] = field(default_factory=list)
    """Load threads that stopped on an unexpected error."""
    send_failures: int = 0

    @property
    def ok(self) -> bool:
        found = self.lost or self.reordered or self.duplicated or self.undelivered
        return not (found or self.errors)

    def summary(self) -> str:
        worst = max(self.reachable_after, default=0.0)
        return (
            f"{len(self.faults)} faults ({', '.join(self.faults)}); {self.receipted} receipted "
            f"sends, {self.send_failures} failed; lost {len(self.lost)}, reordered "
            f"{len(self.reordered)}, duplicated {len(self.duplicated)}, undelivered "
            f"{len(self.undelivered)}, load errors {self.errors}; every topic reachable again "
            f"within {worst:.1f} s "
            f"(each fault: {', '.join(f'{t:.1f}' for t in self.reachable_after)})"
        )


class Cluster:
    """``nodes`` JetStream nodes and ``brokers`` broker processes under ``base``."""

    def __init__(self, base: Path, nodes: int = 3, brokers: int = 3, lease: float = 20) -> None:
        self.nodes = jetstream_nodes(nodes, base / "jetstream")
        store = "nats://" + ",".join(f"127.0.0.1:{n.client_port}" for n in self.nodes)
        copies = 3 if nodes >= 3 else 1
        settings = [
            f"metadataStoreUrl={store}",
            f"clusterName=c{uuid.uuid4().hex[:6]}",
            f"starquakeOwnershipLeaseSeconds={lease}",
            f"managedLedgerDefaultEnsembleSize={copies}",
            f"managedLedgerDefaultWriteQuorum={copies}",
            f"managedLedgerDefaultAckQuorum={copies // 2 + 1}",
        ]
        self.brokers = [
            BrokerProcess(base / f"broker-{i}", *settings, log_level="INFO") for i in range(brokers)
        ]

    @property
    def service_url(self) -> str:
        return multi_host_url(self.brokers)

    @contextlib.contextmanager
    def running(self) -> Iterator[Cluster]:
        try:
            for node in self.nodes:
                node.start()
            for broker in self.brokers:
                broker.start(timeout=60)
            yield self
        finally:
            for broker in self.brokers:
                broker.cleanup()
            for node in self.nodes:
                node.kill()

    def provision(self) -> None:
        """The partitioned topic, the deduplicated namespace, and unlimited retention in both
        namespaces (acknowledged ledgers would otherwise be deleted, and the end checks read
        everything back)."""
        broker = self.brokers[0]
        status, body = admin_json(broker, "PUT", f"/admin/v2/namespaces/{DEDUP_NAMESPACE}")
        assert status in (204, 409), (status, body)
        for namespace in ("public/default", DEDUP_NAMESPACE):
            path = f"/admin/v2/namespaces/{namespace}/retention"
            forever = {"retentionTimeInMinutes": -1, "retentionSizeInMB": -1}
            status, body = admin_json(broker, "POST", path, forever)
            assert status == 204, (status, body)
        path = f"/admin/v2/namespaces/{DEDUP_NAMESPACE}/deduplication"
        status, body = admin_json(broker, "POST", path, True)
        assert status == 204, (status, body)
        path = f"/admin/v2/persistent/public/default/{PARTITIONED}/partitions"
        status, body = admin_json(broker, "PUT", path, PARTITIONS)
        assert status in (204, 409), (status, body)


def wait_until_healthy(nodes: list[JetStreamNode], deadline: float) -> float:
    """Seconds until every JetStream stream has a leader and every replica is current (a
    node started again has caught up), at most ``deadline``: a node fault is injected only
    into a healthy cluster, as a replicated store tolerates one fault at a time (a second
    node lost while the first still catches up leaves some streams without a quorum)."""

    async def healthy() -> bool:
        nc = await nats.connect(servers=[n.url for n in nodes], connect_timeout=2)
        try:
            for info in await nc.jetstream(timeout=2).streams_info():
                cluster = info.cluster
                if cluster is None:
                    continue
                replicas = cluster.replicas or []
                if not cluster.leader or not all(r.current and not r.offline for r in replicas):
                    return False
            return True
        finally:
            await nc.close()

    started = time.monotonic()
    while time.monotonic() - started < deadline:
        with contextlib.suppress(Exception):
            if asyncio.run(healthy()):
                break
        time.sleep(0.5)
    return time.monotonic() - started


def topic_name(short: str) -> str:
    if short == "dedup":
        return f"persistent://{DEDUP_NAMESPACE}/dedup-0"
    return f"persistent://public/default/{short}"


class Load:
    """The producers and consumers, each in its own thread, until :meth:`stop`."""

    def __init__(self, service_url: str, rng: random.Random) -> None:
        self._url = service_url
        self._rng = rng
        self._stopping = threading.Event()
        self._threads: list[threading.Thread] = []
        self._lock = threading.Lock()
        self.receipted: dict[str, list[int]] = defaultdict(list)
        """Producer name -> the sequence numbers that got a receipt."""
        self.received: dict[str, set[str]] = defaultdict(set)
        """Subscription topic -> the payloads received."""
        self.failures = 0
        self.errors: list[str] = []

    def start(self) -> None:
        for short in (*PLAIN, PARTITIONED, "dedup"):
            self._spawn(f"producer {short}", lambda s=short: self._produce(s))
        for short, kind in SUBSCRIPTIONS.items():
            self._spawn(f"consumer {short}", lambda s=short, k=kind: self._consume(s, k))

    def _spawn(self, name: str, target: Callable[[], None]) -> None:
        def run() -> None:
            try:
                target()
            except Exception as exc:  # reported by check(): a thread must not die silently
                with self._lock:
                    self.errors.append(f"{name}: {exc!r}")

        thread = threading.Thread(target=run, name=name, daemon=True)
        thread.start()
        self._threads.append(thread)

    def _produce(self, short: str) -> None:
        """Numbered sends to ``short``; to the deduplicated topic with explicit sequence ids,
        a failed one sent again (stored at most once), elsewhere the next number goes on."""
        deduplicated = short == "dedup"
        client = _quiet_client(self._url)
        name = f"p-{short}"
        try:
            producer = client.create_producer(
                topic_name(short),
                producer_name=name,
                batching_enabled=False,
                send_timeout_millis=30_000,
            )
            seq = producer.last_sequence_id() + 1
            while not self._stopping.is_set():
                payload = f"{name}|{seq}".encode()
                try:
                    if deduplicated:
                        producer.send(payload, sequence_id=seq)
                    else:
                        producer.send(payload, partition_key=f"k{seq % 16}")
                except pulsar.PulsarException:
                    with self._lock:
                        self.failures += 1
                    if deduplicated:
                        continue
                else:
                    with self._lock:
                        self.receipted[name].append(seq)
                seq += 1
                time.sleep(self._rng.uniform(0, 0.004))
        finally:
            with contextlib.suppress(pulsar.PulsarException):
                client.close()

    def _consume(self, short: str, kind: pulsar.ConsumerType) -> None:
        client = _quiet_client(self._url)
        try:
            consumer = client.subscribe(
                topic_name(short),
                f"sub-{short}",
                consumer_type=kind,
                initial_position=pulsar.InitialPosition.Earliest,
            )
            quiet_since = time.monotonic()
            # after stop(): drain until nothing came for 20 s (a consumer may be on its way
            # to a topic's new owner)
            while not (self._stopping.is_set() and time.monotonic() - quiet_since > 20):
                try:
                    msg = consumer.receive(1000)
                except pulsar.Timeout:
                    continue
                quiet_since = time.monotonic()
                with self._lock:
                    self.received[short].add(msg.data().decode())
                with contextlib.suppress(pulsar.PulsarException):
                    consumer.acknowledge(msg)
        finally:
            with contextlib.suppress(pulsar.PulsarException):
                client.close()

    def stop(self) -> None:
        self._stopping.set()
        for thread in self._threads:
            thread.join(120)


def reachable_within(
    service_url: str, deadline: float, log: Callable[[str], None] = lambda _: None
) -> float:
    """Seconds until a send to every topic got a receipt (each through a new producer),
    or ``deadline`` if some did not by then; ``log`` hears of each topic that took over 2 s."""
    started = time.monotonic()
    client = _quiet_client(service_url, timeout=int(deadline))
    try:
        for short in (*PLAIN, PARTITIONED, "dedup"):
            topic_started = time.monotonic()
            while time.monotonic() - started < deadline:
                try:
                    producer = client.create_producer(
                        topic_name(short), send_timeout_millis=int(deadline * 1000)
                    )
                    producer.send(b"probe")  # never read back: not a numbered payload
                    producer.close()
                    break
                except pulsar.PulsarException as exc:
                    log(f"  {short}: {exc}")
                    time.sleep(0.2)
            took = time.monotonic() - topic_started
            if took > 2:
                log(f"  {short} took {took:.1f} s")
    finally:
        with contextlib.suppress(pulsar.PulsarException):
            client.close()
    return min(time.monotonic() - started, deadline)


def stored_payloads_of(service_url: str, name: str) -> list[str]:
    """Every numbered payload of topic ``name`` (not partitioned), in stored order."""
    client = _quiet_client(service_url)
    out = []
    try:
        reader = client.create_reader(name, pulsar.MessageId.earliest)
        while reader.has_message_available():
            data = reader.read_next(30_000).data().decode(errors="replace")
            if "|" in data:
                out.append(data)
    finally:
        with contextlib.suppress(pulsar.PulsarException):
            client.close()
    return out


def _reordered(label: str, seqs: list[int]) -> list[str]:
    """Where the first copies of ``seqs`` are not in increasing order."""
    firsts = list(dict.fromkeys(seqs))
    return [f"{label}: {a} before {b}" for a, b in itertools.pairwise(firsts) if a > b]


def check(load: Load, service_url: str, report: Report) -> None:
    """The end checks (see the module docstring) into ``report``; a partitioned topic's order
    is checked per partition (each key goes to one)."""
    report.send_failures = load.failures
    report.receipted = sum(len(s) for s in load.receipted.values())
    report.errors.extend(load.errors)
    for short in (*PLAIN, PARTITIONED, "dedup"):
        producer = f"p-{short}"
        names = [topic_name(short)]
        if short == PARTITIONED:
            names = [f"{names[0]}-partition-{i}" for i in range(PARTITIONS)]
        kept: list[int] = []
        for name in names:
            payloads = stored_payloads_of(service_url, name)
            seqs = [int(p.partition("|")[2]) for p in payloads if p.startswith(producer + "|")]
            report.reordered.extend(_reordered(name, seqs))
            kept += seqs
        receipted = load.receipted.get(producer, [])
        report.lost.extend(f"{producer}|{seq}" for seq in sorted(set(receipted) - set(kept)))
        if short == "dedup":
            counts = Counter(kept)
            report.duplicated.extend(f"{producer}|{s} x{c}" for s, c in counts.items() if c > 1)
        delivered = load.received.get(short, set())
        report.undelivered.extend(sorted({f"{producer}|{seq}" for seq in receipted} - delivered))


def run_campaign(
    base: Path,
    faults: int,
    seed: int,
    *,
    kinds: tuple[str, ...] = (),
    lease: float = 20,
    reach_deadline: float = 30,
    log: Callable[[str], None] = lambda _: None,
) -> Report:
    """Run ``faults`` kill -9 faults (seeded) against a fresh cluster under ``base``;
    ``kinds`` ("broker" or "node" each) fixes what the first faults kill."""
    rng = random.Random(seed)
    report = Report()
    with Cluster(base, lease=lease).running() as cluster:
        cluster.provision()
        load = Load(cluster.service_url, random.Random(seed + 1))
        load.start()
        try:
            for number in range(faults):
                time.sleep(rng.uniform(1, 5))
                victim: BrokerProcess | JetStreamNode
                kind = kinds[number] if number < len(kinds) else ""
                if kind == "broker" or (not kind and rng.random() < 0.6):
                    victim = rng.choice(cluster.brokers)
                    label = f"broker {cluster.brokers.index(victim)}"
                else:
                    victim = rng.choice(cluster.nodes)
                    label = f"node {victim.name}"
                victim.kill()
                report.faults.append(label)
                took = reachable_within(cluster.service_url, reach_deadline, log)
                report.reachable_after.append(took)
                log(
                    f"fault {number + 1}/{faults}: kill -9 {label}; every topic reachable in "
                    f"{took:.1f} s"
                )
                time.sleep(rng.uniform(0, 3))
                if isinstance(victim, BrokerProcess):
                    victim.start(timeout=60)
                else:
                    victim.start()
                    took = wait_until_healthy(cluster.nodes, 120)
                    log(f"  {label} started again; the store was healthy after {took:.1f} s")
        finally:
            load.stop()
        check(load, cluster.service_url, report)
    return report
