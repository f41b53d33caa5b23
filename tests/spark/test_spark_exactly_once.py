"""End to end exactly once: a streaming pipeline killed (kill -9 of Python and JVM) inside a
micro-batch and restarted on its checkpoint writes each source message to the sink once."""

from __future__ import annotations

import collections
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from conftest import SparkBroker
from spark_helpers import produce, read_topic

PIPELINE = Path(__file__).with_name("eo_pipeline.py")


def _pipeline(broker: SparkBroker, source: str, sink: str, ckpt: Path, *extra: str) -> list[str]:
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


def _progress(ckpt: Path) -> str:
    """The micro-batches the checkpoint planned (offsets) and committed (commits)."""
    logs = {
        name: sorted(int(p.name) for p in (ckpt / name).glob("*") if p.name.isdigit())
        for name in ("offsets", "commits")
    }
    return f"offsets {logs['offsets']}, commits {logs['commits']}"


@pytest.mark.slow
@pytest.mark.timeout(600)
def test_killed_pipeline_restarted_on_its_checkpoint_writes_each_message_once(
    spark_broker: SparkBroker, new_topic: str, workdir: Path
) -> None:
    source, sink = new_topic, new_topic + "-sink"
    spark_broker.create_partitioned(source, 2)
    total = 3000
    produce(spark_broker, source, total, batching_max_messages=200)
    ckpt = workdir / "checkpoint"
    log = open(workdir / "pipeline.log", "wb")  # noqa: SIM115 - closed below
    proc = subprocess.Popen(
        _pipeline(spark_broker, source, sink, ckpt),
        stdout=log,
        stderr=subprocess.STDOUT,
        start_new_session=True,
    )
    try:
        deadline = time.monotonic() + 300
        written = 0
        while time.monotonic() < deadline:
            written = len(read_topic(spark_broker, sink)) if proc.poll() is None else -1
            if written > 0 and written % 500 != 0:  # part of a micro-batch is in the sink
                break
            assert proc.poll() is None, (workdir / "pipeline.log").read_text()
            time.sleep(0.2)
        assert 0 < written < total, f"no kill point found (sink had {written})"
    finally:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait(30)
        log.close()
    # restart on the same checkpoint and let it finish the backlog
    finish = subprocess.run(
        _pipeline(spark_broker, source, sink, ckpt, "--available-now"),
        capture_output=True,
        timeout=400,
    )
    assert finish.returncode == 0, finish.stdout.decode()[-3000:] + finish.stderr.decode()[-3000:]
    written_out = read_topic(spark_broker, sink)
    counts = collections.Counter(m.properties()["src"] for m in written_out)
    producers = collections.Counter(m.producer_name() for m in written_out)
    sources = read_topic(spark_broker, source)
    assert len(sources) == total, (len(sources), _progress(ckpt))
    missing = [
        (m.topic_name()[-1], str(m.message_id()))
        for m in sources
        if f"{m.topic_name()}/{m.message_id().serialize().hex().upper()}" not in counts
    ]
    assert not missing, (len(missing), missing[:3], missing[-3:], producers, _progress(ckpt))
    assert len(counts) == total
    assert set(counts.values()) == {1}, [k for k, n in counts.items() if n > 1][:5]
