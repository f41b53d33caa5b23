"""Broker processes the benchmark drivers start, watch and stop; imports no client module."""

from __future__ import annotations

import datetime as dt
import os
import platform
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parent.parent


def log(msg: str) -> None:
    """A timestamped progress line on stderr."""
    print(f"[{time.strftime('%H:%M:%S')}] {msg}", file=sys.stderr, flush=True)


def free_port() -> int:
    """A TCP port free on 127.0.0.1 just now."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def accepts(port: int) -> bool:
    """Whether something accepts TCP connections on 127.0.0.1:``port``."""
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=0.5):
            return True
    except OSError:
        return False


@dataclass
class Broker:
    """A broker process this script started, and where it keeps its files."""

    name: str
    port: int
    proc: subprocess.Popen[bytes]
    workdir: Path
    log_path: Path
    command: list[str]

    @property
    def service_url(self) -> str:
        """The broker's pulsar:// URL."""
        return f"pulsar://127.0.0.1:{self.port}"

    def alive(self) -> bool:
        """Whether the broker process is still running."""
        return self.proc.poll() is None

    def cpu_seconds(self) -> float:
        """utime + stime of the broker and its live descendants."""
        return sum(_proc_cpu(pid) for pid in _process_tree(self.proc.pid))

    def peak_rss_mb(self) -> float | None:
        """The process's peak resident memory in MB (None if unknown)."""
        try:
            for line in Path(f"/proc/{self.proc.pid}/status").read_text().splitlines():
                if line.startswith("VmHWM:"):
                    return round(int(line.split()[1]) / 1024, 1)
        except OSError:
            pass
        return None

    def stop(self) -> None:
        """SIGTERM, then SIGKILL if the broker does not exit within 15 s."""
        if self.alive():
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout=15)
            except subprocess.TimeoutExpired:
                log(f"{self.name} did not stop on SIGTERM, killing pid {self.proc.pid}")
                self.proc.kill()
                self.proc.wait(timeout=10)

    def log_tail(self, lines: int = 20) -> str:
        """The last ``lines`` lines of the broker's log."""
        try:
            return "\n".join(self.log_path.read_text(errors="replace").splitlines()[-lines:])
        except OSError:
            return ""


_CLK_TCK = os.sysconf("SC_CLK_TCK")


def _proc_cpu(pid: int) -> float:
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return 0.0
    fields = stat[stat.rindex(")") + 2 :].split()
    return (int(fields[11]) + int(fields[12])) / _CLK_TCK  # utime, stime


def _process_tree(root: int) -> list[int]:
    children: dict[int, list[int]] = {}
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text()
        except OSError:
            continue
        ppid = int(stat[stat.rindex(")") + 2 :].split()[1])
        children.setdefault(ppid, []).append(int(entry.name))
    out, todo = [], [root]
    while todo:
        pid = todo.pop()
        out.append(pid)
        todo.extend(children.get(pid, []))
    return out


def wait_ready(broker: Broker, ready: Callable[[], bool], timeout: float) -> None:
    """Wait until ``ready()`` holds; RuntimeError if the broker exits or is late."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if not broker.alive():
            raise RuntimeError(
                f"{broker.name} exited with {broker.proc.returncode}:\n{broker.log_tail()}"
            )
        if ready():
            return
        time.sleep(0.1)
    broker.stop()
    raise RuntimeError(f"{broker.name} not ready after {timeout:.0f}s:\n{broker.log_tail()}")


def spawn(name: str, command: list[str], workdir: Path, port: int, **env: str) -> Broker:
    """Start ``command`` in ``workdir`` with its output in broker.log."""
    log_path = workdir / "broker.log"
    with log_path.open("wb") as out:
        proc = subprocess.Popen(
            command,
            cwd=workdir,
            stdout=out,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            env={**os.environ, **env},
        )
    log(f"started {name} pid {proc.pid}: {' '.join(command)}")
    return Broker(name, port, proc, workdir, log_path, command)


def healthy(web_port: int) -> bool:
    """Whether the broker's health check on ``web_port`` answers ok."""
    url = f"http://127.0.0.1:{web_port}/admin/v2/brokers/health"
    try:
        with urllib.request.urlopen(url, timeout=1.0) as resp:
            body = resp.read().decode(errors="replace").strip().strip('"')
            return bool(resp.status == 200 and body == "ok")
    except (urllib.error.URLError, OSError):
        return False


def start_standalone(
    starquake_cmd: str, prefix: str, extra: list[str], parent: str | None = None
) -> Broker:
    """``starquake standalone`` (``starquake_cmd``, split on spaces) in a fresh temporary
    directory named ``prefix...`` (in ``parent``, else the system's), on free loopback ports,
    with ``extra`` arguments after the ports; returned once its health check answers and its
    broker port accepts."""
    workdir = Path(tempfile.mkdtemp(prefix=prefix, dir=parent))
    port, web_port = free_port(), free_port()
    command = [
        *starquake_cmd.split(),
        "standalone",
        *("--data-dir", str(workdir / "data")),
        *("--broker-port", str(port)),
        *("--web-port", str(web_port)),
        *extra,
    ]
    broker = spawn("starquake", command, workdir, port)
    wait_ready(broker, lambda: healthy(web_port) and accepts(port), timeout=60)
    return broker


def stop_broker(broker: Broker, keep: bool) -> None:
    """Stop ``broker``; delete its directory unless ``keep`` (then say where it is)."""
    broker.stop()
    if keep:
        log(f"kept {broker.name} files in {broker.workdir}")
    else:
        shutil.rmtree(broker.workdir, ignore_errors=True)


def default_starquake_cmd() -> str:
    """The ``starquake`` command of this venv (else the one on PATH)."""
    sibling = Path(sys.executable).parent / "starquake"
    if sibling.exists():
        return str(sibling)
    venv = REPO / ".venv" / "bin" / "starquake"
    return str(venv) if venv.exists() else (shutil.which("starquake") or "starquake")


def _starquake_build() -> str:
    """Either "compiled" or "pure Python (why)": what a broker started from this venv runs (it
    follows STARQUAKE_PURE, which the brokers inherit)."""
    from starquake import _native

    return _native.BUILD


def machine_info() -> dict[str, Any]:
    """Where and with what a run was made: date, host, CPUs, versions, load."""
    import importlib.metadata as md

    def version(pkg: str) -> str | None:
        try:
            return md.version(pkg)
        except md.PackageNotFoundError:
            return None

    return {
        "date": dt.datetime.now(dt.UTC).isoformat(timespec="seconds"),
        "host": platform.node(),
        "platform": platform.platform(),
        "cpus": os.cpu_count(),
        "python": platform.python_version(),
        "pulsar_client": version("pulsar-client"),
        "starquake": version("starquake"),
        "starquake_build": _starquake_build(),
        "loadavg": os.getloadavg(),
    }
