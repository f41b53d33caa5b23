"""``starquake cluster start``: a development cluster on this machine, in the foreground.

It starts ``--storage-nodes`` NATS JetStream nodes (one JetStream cluster; the ledgers, 3
copies of each entry with 3 or more nodes, else 1; and the metadata) and ``--brokers``
brokers (``starquake standalone`` processes joined to the cluster through ``metadataStoreUrl``
and ``configurationMetadataStoreUrl``), each with its own directory under ``--data-dir`` and
its own ports (from ``--base-port`` on, or free ones). Once every broker serves it prints the
service URL (every broker's binary address, as Pulsar's clients take a multi-host URL) and the
web URLs. SIGTERM or Ctrl-C stops the brokers, then the nodes; a broker that dies is
reported, not restarted.
"""

from __future__ import annotations

import contextlib
import signal
import socket
import subprocess
import sys
import threading
import time
from dataclasses import dataclass
from pathlib import Path

import click

from starquake.cluster.nodes import JetStreamNode, NodeStartError, free_port, jetstream_nodes

__all__ = ["cluster"]

BROKER_START_SECONDS = 60.0


@dataclass
class _Broker:
    index: int
    data_dir: Path
    port: int
    web_port: int
    proc: subprocess.Popen[bytes] | None = None

    @property
    def address(self) -> str:
        return f"127.0.0.1:{self.port}"

    @property
    def web_url(self) -> str:
        return f"http://127.0.0.1:{self.web_port}"


def _ports(base: int, count: int) -> list[int]:
    """``count`` ports from ``base`` on (free ones when ``base`` is 0)."""
    return [base + i for i in range(count)] if base else [free_port() for _ in range(count)]


def _listening(port: int) -> bool:
    try:
        socket.create_connection(("127.0.0.1", port), 0.2).close()
    except OSError:
        return False
    return True


def _start_broker(broker: _Broker, defines: list[str], log_level: str) -> None:
    broker.data_dir.mkdir(parents=True, exist_ok=True)
    command = [
        sys.executable,
        "-m",
        "starquake.cli.main",
        "standalone",
        "--data-dir",
        str(broker.data_dir / "data"),
        "--broker-port",
        str(broker.port),
        "--web-port",
        str(broker.web_port),
        "--bind-address",
        "127.0.0.1",
        "--log-level",
        log_level,
    ]
    for define in defines:
        command += ["-D", define]
    with open(broker.data_dir / "broker.log", "ab") as log:
        broker.proc = subprocess.Popen(command, stdout=log, stderr=subprocess.STDOUT)


def _wait_serving(brokers: list[_Broker], timeout: float) -> None:
    """Until every broker listens on both ports; ClickException when one exits or is late."""
    deadline = time.monotonic() + timeout
    waiting = list(brokers)
    while waiting:
        for broker in list(waiting):
            assert broker.proc is not None
            if broker.proc.poll() is not None:
                raise click.ClickException(
                    f"broker {broker.index} exited; see {broker.data_dir / 'broker.log'}"
                )
            if _listening(broker.port) and _listening(broker.web_port):
                waiting.remove(broker)
        if waiting and time.monotonic() > deadline:
            raise click.ClickException(
                f"broker {waiting[0].index} did not serve within {timeout:.0f} s; "
                f"see {waiting[0].data_dir / 'broker.log'}"
            )
        time.sleep(0.1)


def _stop(brokers: list[_Broker], nodes: list[JetStreamNode]) -> None:
    for broker in brokers:
        if broker.proc is not None and broker.proc.poll() is None:
            broker.proc.terminate()
    for broker in brokers:
        if broker.proc is not None:
            try:
                broker.proc.wait(30)
            except subprocess.TimeoutExpired:
                broker.proc.kill()
                broker.proc.wait(10)
    for node in nodes:
        node.stop()


def _watch(brokers: list[_Broker], stopping: threading.Event) -> None:
    """Report each broker that dies, until ``stopping`` is set."""
    reported: set[int] = set()
    while not stopping.wait(0.5):
        for broker in brokers:
            code = broker.proc.poll() if broker.proc is not None else None
            if code is not None and broker.index not in reported:
                reported.add(broker.index)
                click.echo(f"broker {broker.index} exited with status {code}", err=True)


@click.group("cluster")
def cluster() -> None:
    """A development cluster: JetStream nodes and brokers on this machine."""


@cluster.command("start")
@click.option("--brokers", "broker_count", default=2, show_default=True, type=click.IntRange(1, 16))
@click.option(
    "--storage-nodes", "node_count", default=1, show_default=True, type=click.IntRange(1, 7)
)
@click.option(
    "--data-dir",
    default="starquake-cluster",
    show_default=True,
    type=click.Path(file_okay=False, path_type=Path),
    help="one directory per node and broker inside",
)
@click.option(
    "--base-port",
    default=0,
    show_default=True,
    type=click.IntRange(0, 65000),
    help="first port (brokers' binary ports, then web ports, then the nodes'); 0: free ports",
)
@click.option("--cluster-name", default="starquake", show_default=True)
@click.option("--log-level", default="INFO", show_default=True)
@click.option("-D", "defines", multiple=True, help="a broker setting key=value (repeatable)")
def start(
    broker_count: int,
    node_count: int,
    data_dir: Path,
    base_port: int,
    cluster_name: str,
    log_level: str,
    defines: tuple[str, ...],
) -> None:
    """Start the nodes and the brokers; stop them all on SIGTERM or Ctrl-C."""
    ports = _ports(base_port, 2 * broker_count)
    brokers = [
        _Broker(i, data_dir / f"broker-{i}", ports[i], ports[broker_count + i])
        for i in range(broker_count)
    ]
    nodes = jetstream_nodes(node_count, data_dir / "storage")
    if base_port:
        for i, node in enumerate(nodes):
            node.client_port = base_port + 2 * broker_count + i
            node.cluster_port = base_port + 2 * broker_count + node_count + i
        for node in nodes:
            node.routes = [n.cluster_port for n in nodes]
    stopping = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stopping.set())
    try:
        for node in nodes:
            node.start()
        store = "nats://" + ",".join(f"127.0.0.1:{n.client_port}" for n in nodes)
        copies = 3 if node_count >= 3 else 1  # JetStream's replica counts are odd
        settings = [
            f"metadataStoreUrl={store}",
            f"configurationMetadataStoreUrl={store}",
            f"clusterName={cluster_name}",
            f"managedLedgerDefaultEnsembleSize={copies}",
            f"managedLedgerDefaultWriteQuorum={copies}",
            f"managedLedgerDefaultAckQuorum={copies // 2 + 1}",
            *defines,
        ]
        for broker in brokers:
            _start_broker(broker, settings, log_level)
        _wait_serving(brokers, BROKER_START_SECONDS)
        click.echo("service URL: pulsar://" + ",".join(b.address for b in brokers))
        click.echo("web URLs: " + " ".join(b.web_url for b in brokers))
        click.echo(f"storage: {store} ({node_count} JetStream node(s))")
        watcher = threading.Thread(target=_watch, args=(brokers, stopping), daemon=True)
        watcher.start()
        with contextlib.suppress(KeyboardInterrupt):
            stopping.wait()
    except NodeStartError as exc:
        raise click.ClickException(str(exc)) from None
    finally:
        stopping.set()
        _stop(brokers, nodes)
        click.echo("cluster stopped", err=True)
