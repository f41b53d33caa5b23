"""``starquake standalone`` in a child process, for tests that stop, kill -9 and restart it."""

from __future__ import annotations

import contextlib
import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pulsar


def free_port() -> int:
    """A TCP port that was free a moment ago on 127.0.0.1."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class BrokerProcess:
    """A broker process on fresh ports over ``data_dir``; ``defines`` are ``-D key=value``.

    The broker's log goes to ``log_path`` (appended across restarts), so that tests can check
    what it told the operator.
    """

    def __init__(
        self,
        data_dir: Path,
        *defines: str,
        log_level: str = "WARNING",
        env: dict[str, str] | None = None,
    ) -> None:
        self.data_dir = data_dir
        self.env = env
        self.defines = list(defines)
        self.log_level = log_level
        self.port = free_port()
        self.web_port = free_port()
        self.log_path = data_dir.parent / f"{data_dir.name}-broker.log"
        self.proc: subprocess.Popen[bytes] | None = None

    @property
    def url(self) -> str:
        return f"pulsar://127.0.0.1:{self.port}"

    @property
    def web_service_url(self) -> str:
        return f"http://127.0.0.1:{self.web_port}"

    @property
    def running(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def command(self) -> list[str]:
        cmd = [
            sys.executable,
            "-m",
            "starquake.cli.main",
            "standalone",
            "--data-dir",
            str(self.data_dir),
            "--broker-port",
            str(self.port),
            "--web-port",
            str(self.web_port),
            "--bind-address",
            "127.0.0.1",
            "--log-level",
            self.log_level,
        ]
        for define in self.defines:
            cmd += ["-D", define]
        return cmd

    def start(self, timeout: float = 30) -> None:
        with open(self.log_path, "ab") as log:
            env = None if self.env is None else {**os.environ, **self.env}
            self.proc = subprocess.Popen(
                self.command(), stdout=log, stderr=subprocess.STDOUT, env=env
            )
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            try:
                with socket.create_connection(("127.0.0.1", self.port), timeout=0.2):
                    return
            except OSError:
                if self.proc.poll() is not None:
                    raise RuntimeError(f"broker exited during start-up:\n{self.log()}") from None
                time.sleep(0.05)
        self.proc.kill()  # not left running into the next test
        self.proc.wait(10)
        raise RuntimeError(f"broker did not start within {timeout} s:\n{self.log()}")

    def log(self) -> str:
        """Everything the broker logged so far."""
        try:
            return self.log_path.read_text(errors="replace")
        except FileNotFoundError:
            return ""

    def kill(self) -> None:
        """kill -9."""
        assert self.proc is not None
        self.proc.send_signal(signal.SIGKILL)
        self.proc.wait(10)

    def stop(self) -> None:
        """A clean stop (SIGTERM); the broker must exit with status 0."""
        assert self.proc is not None
        self.proc.send_signal(signal.SIGTERM)
        assert self.proc.wait(30) == 0, self.log()

    def cleanup(self) -> None:
        if self.running:
            assert self.proc is not None
            self.proc.kill()
            self.proc.wait()


@contextlib.contextmanager
def broker_process(data_dir: Path, *defines: str) -> Iterator[BrokerProcess]:
    """A started broker process, killed at the end if it still runs."""
    proc = BrokerProcess(data_dir, *defines)
    proc.start()
    try:
        yield proc
    finally:
        proc.cleanup()


def process_client(url: str, operation_timeout_seconds: int = 5) -> pulsar.Client:
    """The official client, quiet, with a short operation timeout."""
    return pulsar.Client(
        url,
        operation_timeout_seconds=operation_timeout_seconds,
        logger=pulsar.ConsoleLogger(pulsar.LoggerLevel.Error),
    )


def close_after_kill(client: pulsar.Client) -> None:
    """Close a client whose broker was just killed.

    The client may not have noticed the dead connection yet: closing its producers and consumers
    then sends close requests over it, which fail with NotConnected. Nothing is left to release
    on the broker side, so that failure is no failure of the test.
    """
    with contextlib.suppress(pulsar.NotConnected, pulsar.ConnectError):
        client.close()


def read_all(url: str, topic: str) -> list[tuple[bytes, tuple[int, int]]]:
    """Every message of ``topic`` from the earliest, as (payload, (ledger id, entry id))."""
    client = process_client(url)
    try:
        reader = client.create_reader(topic, pulsar.MessageId.earliest)
        out = []
        while reader.has_message_available():
            msg = reader.read_next(5000)
            mid = msg.message_id()
            out.append((msg.data(), (mid.ledger_id(), mid.entry_id())))
        return out
    finally:
        client.close()
