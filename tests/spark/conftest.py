"""Spark tests: one local SparkSession (``local[2]``) for the whole run, and one broker process.

Java is needed; the README test command checks for it. Here a missing ``java`` fails the run
under ``CI=true`` and is reported as a skip (with the reason) elsewhere.
"""

from __future__ import annotations

import faulthandler
import json
import os
import shutil
import sys
import threading
import urllib.request
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from broker_process import BrokerProcess

# The tests' JVMs (the shared SparkSession of a worker, the pipelines the crash tests start)
# live for seconds to minutes beside the other test workers: the optimizing JIT compiler's work
# does not pay back in that time, and the parallel collector's threads compete with the other
# workers. With the quick compiler only and the serial collector, the Spark tests took about a
# fifth less CPU and time here. Where JDK_JAVA_OPTIONS is already set, it is left as it is.
os.environ.setdefault("JDK_JAVA_OPTIONS", "-XX:TieredStopAtLevel=1 -XX:+UseSerialGC")


def _need_java() -> None:
    if shutil.which("java") is not None:
        return
    message = (
        "the Spark tests need Java 17 or newer on PATH "
        "(Debian/Ubuntu: apt-get install openjdk-17-jre-headless)"
    )
    if os.environ.get("CI", "").lower() == "true":
        pytest.fail(message)
    pytest.skip(message)


WORKER_DID_NOT_CONNECT = "Python worker failed to connect back"
"""Spark's error when a Python worker it started did not connect to it within 10 s."""


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """A test of the shared SparkSession that times out ends its worker process (and the JVM)
    instead of failing alone: interrupted inside a call to the JVM, it would leave the session's
    connection out of step, failing every later Spark test of that worker with a wrong answer.
    pytest-xdist starts a new worker for the tests left.

    The timeout covers the test's own call, not its set-up: the shared SparkSession starts in
    the set-up of a worker's first Spark test, which takes minutes on a heavily loaded machine;
    counted in that test's time, a slow start ended the worker, and its replacement started a
    session again in its first test, and so on through every Spark test left. The session's
    start has its own bound (``SESSION_START_LIMIT``).

    A Spark test that failed because a Python worker Spark started did not connect back runs
    once more: Spark waits a fixed 10 s for it (not a setting), which a heavily loaded machine
    can exceed while the worker process starts; any other failure stands."""
    for item in items:
        if "spark" not in getattr(item, "fixturenames", ()):
            continue
        item.add_marker(pytest.mark.flaky(reruns=1, only_rerun=[WORKER_DID_NOT_CONNECT]))
        marker = item.get_closest_marker("timeout")
        seconds = None
        if marker is not None:
            seconds = marker.args[0] if marker.args else marker.kwargs.get("timeout")
        item.add_marker(pytest.mark.timeout(seconds, method="thread", func_only=True), append=False)


SESSION_START_LIMIT = 900.0
"""Seconds the SparkSession may take to start before the worker gives up (as a timeout)."""


def _end_worker_after_a_stuck_start() -> None:
    faulthandler.dump_traceback(sys.stderr)
    sys.stderr.write(f"the SparkSession did not start within {SESSION_START_LIMIT:g} s\n")
    sys.stderr.flush()
    os._exit(1)


@pytest.fixture(scope="session")
def spark() -> Iterator[Any]:
    _need_java()
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
    from pyspark.sql import SparkSession

    watchdog = threading.Timer(SESSION_START_LIMIT, _end_worker_after_a_stuck_start)
    watchdog.daemon = True
    watchdog.start()
    session = (
        SparkSession.builder.master("local[2]")
        .appName("starquake-tests")
        .config("spark.ui.enabled", "false")
        .config("spark.sql.shuffle.partitions", "2")
        .config("spark.sql.session.timeZone", "UTC")
        .getOrCreate()
    )
    session.sparkContext.setLogLevel("ERROR")
    watchdog.cancel()
    yield session
    session.stop()


class SparkBroker:
    """A broker process plus helpers the Spark tests share."""

    def __init__(self, proc: BrokerProcess) -> None:
        self.proc = proc

    @property
    def url(self) -> str:
        return self.proc.url

    @property
    def admin_url(self) -> str:
        return f"http://127.0.0.1:{self.proc.web_port}"

    def options(self, **extra: str) -> dict[str, str]:
        return {"service.url": self.url, "admin.url": self.admin_url, **extra}

    def create_partitioned(self, topic: str, partitions: int, *, update: bool = False) -> None:
        path = topic.replace("://", "/")
        request = urllib.request.Request(
            f"{self.admin_url}/admin/v2/{path}/partitions",
            data=json.dumps(partitions).encode(),
            method="POST" if update else "PUT",
            headers={"Content-Type": "application/json"},
        )
        with urllib.request.urlopen(request, timeout=10) as resp:
            assert resp.status == 204


@pytest.fixture(scope="session")
def spark_broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[SparkBroker]:
    # The topics here have no subscriptions and stay idle for long stretches on a busy machine
    # (JVM start-ups, a killed query's restart): the broker's deletion of inactive topics would
    # take them, data and deduplication state included (tests/compat tests that deletion).
    proc = BrokerProcess(
        tmp_path_factory.mktemp("spark") / "data", "brokerDeleteInactiveTopicsEnabled=false"
    )
    proc.start()
    try:
        yield SparkBroker(proc)
    finally:
        proc.cleanup()


@pytest.fixture(scope="session")
def txn_broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[SparkBroker]:
    """A broker with transactions on and deduplication off (exactlyOnceMode=transaction)."""
    proc = BrokerProcess(
        tmp_path_factory.mktemp("txn") / "data",
        "transactionCoordinatorEnabled=true",
        "brokerDeduplicationEnabled=false",
        "brokerDeleteInactiveTopicsEnabled=false",
    )
    proc.start()
    try:
        yield SparkBroker(proc)
    finally:
        proc.cleanup()


@pytest.fixture
def new_topic() -> str:
    return f"persistent://public/default/spark-{uuid.uuid4().hex[:10]}"


@pytest.fixture
def workdir(tmp_path: Path) -> Path:
    return tmp_path
