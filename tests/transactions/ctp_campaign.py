"""A consume-transform-produce job (``ctp_job.py``, its own process) under random SIGKILLs of
the job and of the broker: in the end there must be exactly one output per input.

The inputs are stored first; the job then runs, and at random moments spread over its work
(the k-th kill of n once about k/(n+1) of the outputs are out) either the job is killed (and
started again at once) or the broker is (and started again on the same data). Once every
kill is done and every input has its output, the job stops, every transaction ends, and the
output topic is read from the earliest: each input must have exactly one output there (none
lost, none duplicated), and nothing a consumer got from the output topic during the run may be
missing from it (no aborted output was ever delivered).
"""

from __future__ import annotations

import random
import signal
import subprocess
import sys
import time
import uuid
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from admin_http import admin_json
from broker_process import BrokerProcess
from delivery_watch import DeliveryWatcher
from parent_watch import dies_with_parent

from starquake import client as pulsar

JOB = Path(__file__).with_name("ctp_job.py")


@dataclass
class CtpResult:
    """The figures of one CTP campaign."""

    inputs: int = 0
    kills: Counter[str] = field(default_factory=Counter)
    outputs: Counter[bytes] = field(default_factory=Counter)
    """How many times each input's output is stored."""
    delivered_not_stored: set[bytes] = field(default_factory=set)

    @property
    def lost(self) -> int:
        return sum(1 for i in range(self.inputs) if not self.outputs[_output(i)])

    @property
    def duplicated(self) -> int:
        return sum(1 for i in range(self.inputs) if self.outputs[_output(i)] > 1)

    @property
    def violations(self) -> list[str]:
        found = [f"{self.lost} inputs without output"] if self.lost else []
        if self.duplicated:
            dups = [p for p, n in self.outputs.items() if n > 1]
            found.append(f"{self.duplicated} inputs with more than one output: {dups[:10]}")
        if self.delivered_not_stored:
            found.append(f"delivered, then not stored: {sorted(self.delivered_not_stored)[:10]}")
        return found

    def summary(self) -> str:
        kills = ", ".join(f"{k} {n}" for k, n in sorted(self.kills.items()))
        return (
            f"{self.inputs} inputs, kills: {kills}; {sum(self.outputs.values())} outputs stored, "
            f"{self.lost} lost, {self.duplicated} duplicated, "
            f"{len(self.delivered_not_stored)} delivered but not stored"
        )


def _input(i: int) -> bytes:
    return f"in|{i}".encode()


def _output(i: int) -> bytes:
    return b"out|" + _input(i)


class Job:
    """The job's process, started again after each kill."""

    def __init__(self, url: str, source: str, sink: str, mode: str, log_path: Path) -> None:
        self._args = [sys.executable, str(JOB), url, source, sink, mode]
        self._log_path = log_path
        self.proc: subprocess.Popen[bytes] | None = None

    def start(self) -> None:
        with open(self._log_path, "ab") as out:
            self.proc = subprocess.Popen(
                self._args, stdout=out, stderr=subprocess.STDOUT, preexec_fn=dies_with_parent()
            )

    def kill(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGKILL)
            self.proc.wait(10)

    def check_alive(self) -> None:
        if self.proc is not None and self.proc.poll() is not None:
            raise RuntimeError(f"job exited on its own:\n{self._log_path.read_text()[-3000:]}")


class Progress(DeliveryWatcher):
    """Consumes the output topic during the run: which outputs were delivered."""

    def __init__(self, url: str, topic: str) -> None:
        client = pulsar.Client(url, operation_timeout_seconds=10)
        consumer = client.subscribe(
            topic, "progress", initial_position=pulsar.InitialPosition.Earliest
        )
        super().__init__("ctp-progress", client, consumer)


def run_ctp_campaign(
    data_dir: Path,
    inputs: int,
    job_kills: int,
    broker_kills: int,
    seed: int,
    mode: str = "individual",
    say: Callable[[str], None] = lambda _: None,
) -> CtpResult:
    """One campaign (see the module docstring); ``mode``: individual or cumulative acks."""
    rng = random.Random(seed)
    result = CtpResult(inputs=inputs)
    broker = BrokerProcess(
        data_dir, "transactionCoordinatorEnabled=true", "brokerDeduplicationEnabled=true"
    )
    broker.start(timeout=60)
    tag = uuid.uuid4().hex[:8]
    source = f"persistent://public/default/ctp-{tag}-in"
    sink = f"persistent://public/default/ctp-{tag}-out"
    job = Job(broker.url, source, sink, mode, data_dir.parent / "ctp-job.log")
    progress: Progress | None = None
    try:
        client = pulsar.Client(broker.url, operation_timeout_seconds=10)
        producer = client.create_producer(source, batching_enabled=False, block_if_queue_full=True)
        for i in range(inputs):
            producer.send_async(_input(i), None)
        producer.flush()
        client.close()
        progress = Progress(broker.url, sink)
        progress.start()
        job.start()
        schedule = ["job"] * job_kills + ["broker"] * broker_kills
        rng.shuffle(schedule)
        for index, victim in enumerate(schedule):
            # spread over the work: the k-th kill once k/(kills+1) of the outputs are out
            due = (index + 1) * inputs // (len(schedule) + 1)
            deadline = time.monotonic() + 120
            while len(progress.delivered) < due and time.monotonic() < deadline:
                job.check_alive()
                time.sleep(0.05)
            time.sleep(rng.uniform(0, 0.4))
            job.check_alive()
            if victim == "job":
                job.kill()
                job.start()
            else:
                broker.kill()
                broker.start(timeout=60)
            result.kills[victim] += 1
            say(f"killed the {victim} ({sum(result.kills.values())}/{len(schedule)})")
        wanted = {_output(i) for i in range(inputs)}
        deadline = time.monotonic() + 180
        while not wanted <= progress.delivered and time.monotonic() < deadline:
            job.check_alive()
            time.sleep(0.2)
        job.kill()
        _wait_ended(broker)
        progress.close()
        result.outputs, stored = _stored(broker.url, sink)
        result.delivered_not_stored = progress.delivered - stored
    finally:
        job.kill()
        if progress is not None:
            progress.close()
        broker.cleanup()
    return result


def _wait_ended(broker: BrokerProcess) -> None:
    """Until the coordinator has no transaction left (they end at their timeout)."""
    deadline = time.monotonic() + 120
    body = None
    while time.monotonic() < deadline:
        status, body = admin_json(broker, "GET", "/admin/v3/transactions/coordinators/0")
        if status == 200 and body["ongoingTxnSize"] == 0:
            return
        time.sleep(0.25)
    raise AssertionError(f"transactions still ongoing: {body}")


def _stored(url: str, topic: str) -> tuple[Counter[bytes], set[bytes]]:
    """How many times each payload is stored on ``topic`` (read up to a sentinel sent now)."""
    client = pulsar.Client(url, operation_timeout_seconds=10)
    try:
        client.create_producer(topic).send(b"sentinel")
        reader = client.create_reader(topic, pulsar.MessageId.earliest)
        counts: Counter[bytes] = Counter()
        while True:
            data = reader.read_next(30_000).data()
            if data == b"sentinel":
                return counts, set(counts)
            counts[data] += 1
    finally:
        client.close()
