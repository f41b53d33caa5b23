"""One kill point of the exactly-once pipeline (``eo_pipeline.py``): start it, kill -9 the
pipeline (Python and JVM) or the broker once part of a micro-batch is in the sink, restart
what was killed, let the pipeline finish the backlog from its checkpoint, and count what the
sink holds per source message. Used by tests/spark/test_spark_exactly_once.py (one point) and
bench/spark_kill_campaign.py (many random points)."""

from __future__ import annotations

import collections
import json
import os
import signal
import subprocess
import sys
import time
import urllib.request
from dataclasses import dataclass
from pathlib import Path

from conftest import SparkBroker
from spark_helpers import count_topic, produce, read_topic

PIPELINE = Path(__file__).with_name("eo_pipeline.py")
TOTAL = 3000  # source messages of a campaign run: 6 micro-batches of 500


@dataclass
class Outcome:
    """What the sink holds after a kill point: source messages missing and stored twice."""

    killed_at: int  # sink rows when the kill came
    lost: int
    duplicated: int
    detail: str


def pipeline_command(
    broker: SparkBroker, source: str, sink: str, ckpt: Path, *extra: str
) -> list[str]:
    return [
        sys.executable,
        str(PIPELINE),
        broker.url,
        broker.admin_url,
        source,
        sink,
        str(ckpt),
        *extra,
    ]


def keep_source(broker: SparkBroker, source: str) -> None:
    """Give ``source`` an unlimited retention. The pipeline reads it through non-durable
    readers only, which hold no data back: as in Pulsar, without a durable subscription and
    with no retention, every ledger but the current one is deleted at the next trim, and a
    broker restart starts a new ledger, so the source would be gone at the first trim after
    the broker's kill -9 (managedLedgerTrimIntervalSeconds, 60 s), and a query restarted
    after it would find its micro-batch's rows gone."""
    path = source.replace("://", "/")
    request = urllib.request.Request(
        f"{broker.admin_url}/admin/v2/{path}/retention",
        data=json.dumps({"retentionTimeInMinutes": -1, "retentionSizeInMB": -1}).encode(),
        method="POST",
        headers={"Content-Type": "application/json"},
    )
    with urllib.request.urlopen(request, timeout=10) as resp:
        assert resp.status == 204


def _progress(ckpt: Path) -> str:
    logs = {
        name: sorted(int(p.name) for p in (ckpt / name).glob("*") if p.name.isdigit())
        for name in ("offsets", "commits")
    }
    return f"offsets {logs['offsets']}, commits {logs['commits']}"


def _wait_for_kill_point(
    broker: SparkBroker,
    sink: str,
    proc: subprocess.Popen[bytes],
    at: int,
    log: Path,
    atomic: bool = False,
) -> int:
    """Wait until the sink holds at least ``at`` rows, none of them a whole number of
    micro-batches (so that the kill lands inside one; ``atomic``: micro-batches become
    readable whole, so any number); the rows then."""
    deadline = time.monotonic() + 300
    while time.monotonic() < deadline:
        assert proc.poll() is None, log.read_text()[-3000:]
        written = count_topic(broker, sink)
        if written >= at and (atomic or written % 500 != 0):
            return written
        time.sleep(0.2)
    raise AssertionError(f"no kill point found within 300 s (sink had {written})")


def _run_on(broker: SparkBroker, sink: str, proc: subprocess.Popen[bytes], rows: int) -> None:
    """After the broker's restart: let the running pipeline go on (its tasks reconnect, or the
    query fails) until the sink grows or the process ends."""
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline and proc.poll() is None:
        if count_topic(broker, sink) > rows:
            return
        time.sleep(0.5)


def run_kill_point(
    broker: SparkBroker,
    workdir: Path,
    name: str,
    *,
    kill_broker: bool,
    keyed: bool,
    at: int = 1,
    delay: float = 0.0,
    total: int = TOTAL,
    transaction: bool = False,
) -> Outcome:
    """One run over ``total`` source messages (micro-batches of 500): ``at`` is how many sink
    rows to wait for before the kill (1..total-1), and ``delay`` how long to wait on after that
    (so that kills land at other moments of a micro-batch than the first one seen).
    ``transaction``: the sink writes with exactlyOnceMode=transaction (the broker needs
    transactions on), its micro-batches becoming readable whole."""
    source = f"persistent://public/default/{name}"
    sink = source + "-sink"
    broker.create_partitioned(source, 2)
    broker.create_partitioned(sink, 3)
    keep_source(broker, source)
    produce(broker, source, total, batching_max_messages=200)
    ckpt = workdir / f"{name}-checkpoint"
    log_path = workdir / f"{name}-pipeline.log"
    extra = (() if keyed else ("--drop-key",)) + (("--transaction",) if transaction else ())
    with open(log_path, "wb") as log:
        proc = subprocess.Popen(
            pipeline_command(broker, source, sink, ckpt, *extra),
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
        try:
            killed_at = _wait_for_kill_point(broker, sink, proc, at, log_path, transaction)
            time.sleep(delay)
            if kill_broker:
                broker.proc.kill()
                broker.proc.start()
                _run_on(broker, sink, proc, killed_at)
        finally:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait(30)
    finish = subprocess.run(
        pipeline_command(broker, source, sink, ckpt, "--available-now", *extra),
        capture_output=True,
        timeout=400,
    )
    assert finish.returncode == 0, finish.stdout.decode()[-3000:] + finish.stderr.decode()[-3000:]
    counts = collections.Counter(m.properties()["src"] for m in read_topic(broker, sink))
    sources = read_topic(broker, source)
    assert len(sources) == total
    keys = {f"{m.topic_name()}/{m.message_id().serialize().hex().upper()}" for m in sources}
    lost = len(keys - set(counts))
    duplicated = sum(n - 1 for n in counts.values() if n > 1)
    return Outcome(killed_at, lost, duplicated, _progress(ckpt))
