"""``starquake standalone`` in a child process, for tests that stop, kill -9 and restart it."""

from __future__ import annotations

import contextlib
import os
import random
import resource
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pulsar
from admin_http import admin_json
from parent_watch import dies_with_parent

# our own generator: a library must not draw from (or disturb) the global one
_RANDOM = random.Random()


def _ephemeral_range() -> tuple[int, int]:
    """The ports the kernel hands to outgoing connections (Linux's default elsewhere)."""
    with contextlib.suppress(OSError, ValueError):
        low, high = Path("/proc/sys/net/ipv4/ip_local_port_range").read_text().split()
        return int(low), int(high)
    return 32768, 60999


def free_port() -> int:
    """A TCP port that was free a moment ago on 127.0.0.1, chosen at random outside the
    kernel's ephemeral range: a broker restarted on its old port must find it free, and a
    port of that range can meanwhile become the local end of any process's outgoing
    connection (parallel test workers make thousands)."""
    low, high = _ephemeral_range()
    candidates = [(10000, low - 1)] if low > 11000 else [(high + 1, 65535)]
    for _ in range(200):
        start, end = candidates[0]
        port = _RANDOM.randint(start, end)
        with socket.socket() as s:
            try:
                s.bind(("127.0.0.1", port))
            except OSError:
                continue
            return port
    with socket.socket() as s:  # everything tried was taken: any free port
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def listening_ports(pid: int) -> set[int] | None:
    """The TCP ports process ``pid`` listens on, from ``/proc`` (None where there is no ``/proc``).

    A connection that succeeds proves only that *some* process listens on a port; another
    program can take a port between ``free_port`` and the broker's bind.
    """
    try:
        fds = os.listdir(f"/proc/{pid}/fd")
    except FileNotFoundError:
        return None if not os.path.isdir("/proc/self/fd") else set()
    inodes = set()
    for fd in fds:
        with contextlib.suppress(OSError):
            link = os.readlink(f"/proc/{pid}/fd/{fd}")
            if link.startswith("socket:["):
                inodes.add(link[len("socket:[") : -1])
    ports = set()
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        with contextlib.suppress(FileNotFoundError), open(table) as f:
            for line in f.readlines()[1:]:
                fields = line.split()
                # fields: sl, local address:port (hex), remote, state (0A: LISTEN), ..., inode
                if fields[3] == "0A" and fields[9] in inodes:
                    ports.add(int(fields[1].rsplit(":", 1)[1], 16))
    return ports


def wait_listening(proc: subprocess.Popen[bytes], ports: list[int], timeout: float) -> bool:
    """Wait until ``proc`` itself listens on every port in ``ports``; False if it exited first.

    Raises ``TimeoutError`` after ``timeout`` seconds.
    """
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            return False
        held = listening_ports(proc.pid)
        if held is None:  # no /proc: a connection is the best evidence there is
            with contextlib.suppress(OSError):
                for port in ports:
                    socket.create_connection(("127.0.0.1", port), timeout=0.2).close()
                return True
        elif held.issuperset(ports):
            return True
        time.sleep(0.02)
    raise TimeoutError(f"process {proc.pid} did not listen on {ports} within {timeout} s")


class BrokerProcess:
    """A broker process on fresh ports over ``data_dir``; ``defines`` are ``-D key=value``.

    The broker's log goes to ``log_path`` (appended across restarts), so that tests can check
    what it told the operator. ``open_files`` sets the broker's open-file limit (soft and hard).
    """

    def __init__(
        self,
        data_dir: Path,
        *defines: str,
        log_level: str = "WARNING",
        env: dict[str, str] | None = None,
        open_files: int | None = None,
    ) -> None:
        self.data_dir = data_dir
        self.env = env
        self.open_files = open_files
        self.defines = list(defines)
        self.log_level = log_level
        self.port = free_port()
        self.web_port = free_port()
        self.log_path = data_dir.parent / f"{data_dir.name}-broker.log"
        self.proc: subprocess.Popen[bytes] | None = None
        self._started = False

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
        """Start the broker and wait until it listens on its ports.

        At the first start another program may have taken a port since ``free_port`` chose it;
        the broker then exits naming the address, and it is started again on new ports. A
        restart keeps the ports clients already hold.
        """
        for attempt in range(3):
            log_start = self.log_path.stat().st_size if self.log_path.exists() else 0
            with open(self.log_path, "ab") as log:
                env = None if self.env is None else {**os.environ, **self.env}
                limits = self._limit_open_files if self.open_files else None
                self.proc = subprocess.Popen(
                    self.command(),
                    stdout=log,
                    stderr=subprocess.STDOUT,
                    env=env,
                    preexec_fn=dies_with_parent(limits),
                )
            try:
                if wait_listening(self.proc, [self.port, self.web_port], timeout):
                    self._started = True
                    return
            except TimeoutError:
                self.proc.kill()  # not left running into the next test
                self.proc.wait(10)
                raise RuntimeError(
                    f"broker did not start within {timeout} s:\n{self.log()}"
                ) from None
            port_taken = "address already in use" in self.log()[log_start:]
            if not port_taken or self._started or attempt == 2:
                raise RuntimeError(f"broker exited during start-up:\n{self.log()}")
            self.port, self.web_port = free_port(), free_port()

    def _limit_open_files(self) -> None:
        """In the child, before the broker starts: its open-file limit."""
        assert self.open_files is not None
        resource.setrlimit(resource.RLIMIT_NOFILE, (self.open_files, self.open_files))

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


@contextlib.contextmanager
def running(brokers: list[BrokerProcess], timeout: float = 60) -> Iterator[list[BrokerProcess]]:
    """Start ``brokers`` in order and yield them; clean every one up afterwards (also when a
    start fails)."""
    try:
        for broker in brokers:
            broker.start(timeout=timeout)
        yield brokers
    finally:
        for broker in brokers:
            broker.cleanup()


def multi_host_url(brokers: list[BrokerProcess]) -> str:
    """One service URL naming every broker of ``brokers`` (``pulsar://h1:p1,h2:p2``), as a
    client of a cluster is given."""
    return "pulsar://" + ",".join(b.url.removeprefix("pulsar://") for b in brokers)


def owner_of(brokers: list[BrokerProcess], topic: str) -> BrokerProcess:
    """The broker of ``brokers`` that owns ``topic`` (an admin lookup through the first)."""
    status, body = admin_json(brokers[0], "GET", f"/lookup/v2/topic/{topic.replace('://', '/')}")
    assert status == 200, (status, body)
    for broker in brokers:
        if body["brokerUrl"] == broker.url:
            return broker
    raise AssertionError(f"no broker of {body}")
