"""End to end exactly once: the broker killed (kill -9) under a streaming pipeline inside a
micro-batch and restarted, then the pipeline's process killed too and restarted on its
checkpoint: it writes each source message to the sink once. The sink is partitioned; its rows
are keyed.

The kill point runs over 1500 source messages: three micro-batches of 500, so that the kill
lands inside one and at least one whole micro-batch follows it (a Spark micro-batch costs
seconds, more data checks nothing more). bench/spark_kill_campaign.py runs many random kill
points of the broker, of the pipeline alone, and of both, over 3000 messages (a pipeline-only
kill point is not in the suite: each costs minutes of the suite's time on two cores)."""

from __future__ import annotations

from pathlib import Path

import pytest
from broker_process import BrokerProcess
from conftest import SparkBroker
from eo_crash import run_kill_point

SUITE_TOTAL = 1500


@pytest.mark.slow
@pytest.mark.timeout(900)
def test_broker_killed_under_a_pipeline_loses_and_duplicates_nothing(workdir: Path) -> None:
    # the source topic has no subscription: not deleted while the pipeline is between tasks
    proc = BrokerProcess(workdir / "data", "brokerDeleteInactiveTopicsEnabled=false")
    proc.start()
    try:
        broker = SparkBroker(proc)
        outcome = run_kill_point(
            broker,
            workdir,
            "eo-broker-kill",
            kill_broker=True,
            keyed=True,
            at=700,
            total=SUITE_TOTAL,
        )
        assert (outcome.lost, outcome.duplicated) == (0, 0), outcome
    finally:
        proc.cleanup()
