"""Do hostile connections slow down a normal producer and consumer?

Starts ``starquake standalone`` (basic authentication on, a bcrypt htpasswd) on free loopback
ports. One normal pair (the official ``pulsar-client``: a producer sending asynchronously and
a consumer acknowledging, right credentials) runs for the whole ``--seconds``:

1. baseline: the first quarter, no hostiles;
2. hostile: the middle half, while another process keeps ``--connections`` hostile
   connections open (reopening each one the broker closes after ``--reopen`` seconds):
   idle on the binary and web ports, slow trickles (a web head or a binary frame a byte a
   second), half frames before CONNECT, and wrong basic-auth passwords (binary CONNECT and
   HTTP requests);
3. baseline again: the last quarter.

It prints the pair's throughput in each phase, the ratio hostile / baseline (the mean of both
baselines; target >= 0.90), the pair's errors (failed sends or receives; target 0), what the
hostiles saw, the broker's descriptors and memory, how many lines it logged, and per phase the
CPU of the pair's process, of the broker and of the whole machine (other work included: on a
shared machine the ratio measures the machine too).

``--hostile-target other`` is the control: the hostiles attack a second broker, so the machine
carries the same attack (the hostile process and a broker serving it) while the pair's broker
sees none of it. The ratio then measures what the attack costs the pair through the machine's
CPU alone; the difference to a ``same`` run is what it costs through the pair's broker.

    .venv/bin/python bench/hostile_soak.py [--seconds 600] [--connections 2000] [--rate 0]
        [--kinds idle-binary,...] [--reopen 0.5] [--bcrypt-rounds 10] [--broker-log FILE]
        [--hostile-target same|other] [-D key=value]

``--rate`` caps the producer's messages per second (0: as fast as it goes). Every loop is
bounded by the deadline; everything is on loopback.
"""

from __future__ import annotations

import argparse
import asyncio
import base64
import json
import os
import random
import socket
import struct
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request
from pathlib import Path
from typing import Any

USER, PASSWORD = "soak", "right-password"
KINDS = (
    "idle-binary",
    "idle-web",
    "trickle-web",
    "trickle-binary",
    "half-frame",
    "wrong-password-binary",
    "wrong-password-web",
)


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


class Broker:
    """``starquake standalone`` with basic authentication, in a temporary directory."""

    def __init__(
        self,
        directory: Path,
        bcrypt_rounds: int,
        defines: list[str],
        env: dict[str, str] | None = None,
    ) -> None:
        from passlib.hash import bcrypt

        hashed = bcrypt.using(rounds=bcrypt_rounds).hash(PASSWORD)
        (directory / "htpasswd").write_text(f"{USER}:{hashed}\n")
        self.port, self.web_port = _free_port(), _free_port()
        self.log_path = directory / "broker.log"
        args = [
            sys.executable, "-m", "starquake.cli.main", "standalone",
            "--data-dir", str(directory / "data"),
            "--broker-port", str(self.port), "--web-port", str(self.web_port),
            "--bind-address", "127.0.0.1", "--advertised-address", "127.0.0.1",
            "--log-level", "INFO",
            "-D", "authenticationEnabled=true",
            "-D", "authenticationProviders=basic",
            "-D", f"basicAuthConf={directory / 'htpasswd'}",
        ]  # fmt: skip
        for define in defines:
            args += ["-D", define]
        self._log = self.log_path.open("wb")
        self.process = subprocess.Popen(args, stdout=self._log, stderr=subprocess.STDOUT, env=env)
        self._wait_ready()

    @property
    def url(self) -> str:
        """The broker's pulsar:// URL."""
        return f"pulsar://127.0.0.1:{self.port}"

    def _wait_ready(self) -> None:
        auth = base64.b64encode(f"{USER}:{PASSWORD}".encode()).decode()
        request = urllib.request.Request(
            f"http://127.0.0.1:{self.web_port}/admin/v2/brokers/health",
            headers={"Authorization": f"Basic {auth}"},
        )
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                raise RuntimeError(f"the broker exited; see {self.log_path}")
            try:
                with urllib.request.urlopen(request, timeout=2) as reply:
                    if reply.status == 200:
                        return
            except OSError:
                time.sleep(0.2)
        raise RuntimeError("the broker did not become ready")

    def resources(self) -> dict[str, float]:
        """The broker's open descriptors, resident memory (KiB) and CPU seconds, from /proc."""
        pid = self.process.pid
        out: dict[str, float] = {"fds": -1, "rss_kib": -1, "cpu_s": -1}
        try:
            out["fds"] = len(os.listdir(f"/proc/{pid}/fd"))
            fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
            out["cpu_s"] = round((int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK"), 1)
            for line in Path(f"/proc/{pid}/status").read_text().splitlines():
                if line.startswith("VmRSS:"):
                    out["rss_kib"] = int(line.split()[1])
        except OSError:
            pass
        return out

    def log_lines(self) -> int:
        """Lines the broker logged so far."""
        return len(self.log_path.read_bytes().splitlines())

    def stop(self) -> None:
        """Stop the broker (SIGTERM, then SIGKILL after 30 s)."""
        self.process.terminate()
        try:
            self.process.wait(timeout=30)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait()
        self._log.close()


# --- the normal pair -----------------------------------------------------------------------------


class Pair:
    """A producer and a consumer on one topic; received-message times for the phases."""

    def __init__(self, url: str, rate: float, log_path: Path) -> None:
        import pulsar

        self.log_path = log_path
        self.client = pulsar.Client(
            url,
            authentication=pulsar.AuthenticationBasic(USER, PASSWORD),
            operation_timeout_seconds=30,
            logger=pulsar.FileLogger(pulsar.LoggerLevel.Warn, str(log_path)),
        )
        topic = f"persistent://public/default/soak-{os.getpid()}"
        self.consumer = self.client.subscribe(topic, "soak", receiver_queue_size=5000)
        self.producer = self.client.create_producer(
            topic, block_if_queue_full=True, max_pending_messages=2000
        )
        self.rate = rate
        self.errors: list[str] = []
        self.received: list[float] = []
        self.sent = 0
        self.completed = 0
        self._lock = threading.Lock()

    def run(self, deadline: float) -> None:
        """Produce on a thread and consume here until ``deadline``; then drain (bounded): the
        consumer takes what was sent, so that every send gets its receipt."""
        sender = threading.Thread(target=self._produce, args=(deadline,), daemon=True)
        sender.start()
        self._consume(deadline)
        sender.join(timeout=60)
        # not producer.flush(): it may wait holding the GIL that the send callbacks need
        self._consume(time.monotonic() + 60, until_all=True)
        self.client.close()

    def _sent(self, result: Any, _: Any) -> None:
        import pulsar

        with self._lock:
            self.completed += 1
            if result != pulsar.Result.Ok:
                self.errors.append(f"send: {result}")

    def _produce(self, deadline: float) -> None:
        payload = b"x" * 256
        n = 0
        started = time.monotonic()
        while (now := time.monotonic()) < deadline:
            if self.rate > 0:
                if n > self.rate * (now - started):
                    time.sleep(min(0.01, deadline - now))
                    continue
                # a producer held back does not catch up later (that would inflate the phase
                # after): at most half a second of sends is owed
                started = max(started, now - (n + self.rate / 2) / self.rate)
            try:
                self.producer.send_async(payload, self._sent)
                with self._lock:
                    self.sent += 1
            except Exception as exc:
                with self._lock:
                    self.errors.append(f"send_async: {exc!r}")
                time.sleep(0.1)
            n += 1

    def _consume(self, deadline: float, until_all: bool = False) -> None:
        import pulsar

        while time.monotonic() < deadline:
            if until_all and len(self.received) >= self.sent and self.completed >= self.sent:
                return
            try:
                msg = self.consumer.receive(1000)
            except pulsar.Timeout:
                continue
            except Exception as exc:
                self.errors.append(f"receive: {exc!r}")
                time.sleep(0.1)
                continue
            self.received.append(time.monotonic())
            if len(self.received) % 500 == 0:
                self.consumer.acknowledge_cumulative(msg)

    def rate_between(self, start: float, end: float) -> float:
        """Messages received per second between two monotonic times."""
        count = sum(1 for t in self.received if start <= t < end)
        return count / max(end - start, 1e-9)


# --- the hostiles (a separate process) ------------------------------------------------------------


async def _hold_until_closed(reader: asyncio.StreamReader, deadline: float) -> None:
    while time.monotonic() < deadline:
        try:
            chunk = await asyncio.wait_for(reader.read(65536), deadline - time.monotonic())
        except TimeoutError:
            return
        if not chunk:
            return


def _connect_frame(auth_data: bytes) -> bytes:
    from starquake.protocol._generated import starquake_wire_pb2 as pb
    from starquake.protocol.framing import encode_command

    T = pb.BaseCommand
    cmd = T(type=T.CONNECT)
    cmd.connect.client_version = "hostile"
    cmd.connect.protocol_version = 20
    cmd.connect.auth_method_name = "basic"
    cmd.connect.auth_data = auth_data
    return encode_command(cmd)


async def _act(kind: str, writer: asyncio.StreamWriter, deadline: float) -> None:
    """What one hostile connection of ``kind`` sends (bounded by ``deadline``)."""
    wrong = base64.b64encode(f"{USER}:wrong-{random.getrandbits(32)}".encode())
    if kind == "trickle-web":
        data = b"GET /admin/v2/tenants HTTP/1.1\r\nHost: x\r\n" + b"X-Pad: y\r\n" * 4000
    elif kind == "trickle-binary":
        data = struct.pack(">I", 48 * 1024) + b"\0" * (48 * 1024)
    elif kind == "half-frame":
        size = random.choice([32 * 1024, 60 * 1024, 1024 * 1024])
        writer.write(struct.pack(">I", size) + b"\0" * min(size // 2, 30 * 1024))
        return
    elif kind == "wrong-password-binary":
        writer.write(_connect_frame(f"{USER}:wrong-{random.getrandbits(32)}".encode()))
        return
    elif kind == "wrong-password-web":
        writer.write(
            b"PUT /admin/v2/tenants/t HTTP/1.1\r\nHost: x\r\nAuthorization: Basic "
            + wrong
            + b"\r\nContent-Type: application/json\r\nContent-Length: 2\r\n\r\n{}"
        )
        return
    else:
        return  # idle
    for i in range(len(data)):
        if time.monotonic() >= deadline or writer.is_closing():
            return
        writer.write(data[i : i + 1])
        await asyncio.sleep(1.0)


async def _hostile(
    kind: str, port: int, deadline: float, stats: dict[str, dict[str, int]], pause: float
) -> None:
    counts = stats.setdefault(kind, {"opened": 0, "closed_by_broker": 0, "connect_failed": 0})
    while time.monotonic() < deadline:
        try:
            reader, writer = await asyncio.wait_for(asyncio.open_connection("127.0.0.1", port), 5)
        except (OSError, TimeoutError):
            counts["connect_failed"] += 1
            await asyncio.sleep(pause)
            continue
        counts["opened"] += 1
        try:
            actor = asyncio.ensure_future(_act(kind, writer, deadline))
            await _hold_until_closed(reader, deadline)
            actor.cancel()
            if time.monotonic() < deadline:
                counts["closed_by_broker"] += 1
        except OSError:
            counts["closed_by_broker"] += 1
        finally:
            writer.close()
        await asyncio.sleep(pause)


async def _hostiles(
    port: int, web_port: int, connections: int, seconds: float, kinds: list[str], pause: float
) -> None:
    deadline = time.monotonic() + seconds
    stats: dict[str, dict[str, int]] = {}
    tasks = []
    for i in range(connections):
        kind = kinds[i % len(kinds)]
        target = web_port if kind.endswith("web") else port
        tasks.append(asyncio.ensure_future(_hostile(kind, target, deadline, stats, pause)))
        if i % 100 == 99:
            await asyncio.sleep(0.05)  # open them over a moment, not in one burst
    await asyncio.gather(*tasks, return_exceptions=True)
    print(json.dumps(stats))


def hostile_main(args: argparse.Namespace) -> None:
    """The hostile process: runs ``--connections`` hostiles for ``--seconds``."""
    import resource

    _, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
    import uvloop

    kinds = args.kinds.split(",")
    # uvloop: the same attack (connections, kinds, writes, reopening) for about 40 % less CPU
    # of the generator than the default loop, which shares the machine with the pair
    uvloop.run(
        _hostiles(args.port, args.web_port, args.connections, args.seconds, kinds, args.reopen)
    )
    usage = resource.getrusage(resource.RUSAGE_SELF)
    print(json.dumps({"hostile_process_cpu_s": round(usage.ru_utime + usage.ru_stime, 1)}))


# --- the run -------------------------------------------------------------------------------------


def _machine_busy_s() -> float:
    """CPU seconds the whole machine spent busy (all cores, every process), from /proc/stat."""
    fields = [int(x) for x in Path("/proc/stat").read_text().split("\n", 1)[0].split()[1:]]
    return (sum(fields) - fields[3] - fields[4]) / os.sysconf("SC_CLK_TCK")


class CpuSplit:
    """Who used the CPU in each phase: this process (the pair), the broker(s), the machine."""

    def __init__(self, brokers: dict[str, Broker]) -> None:
        self._brokers = brokers
        self._marks: list[dict[str, float]] = []

    def mark(self) -> None:
        """Sample now (at each phase boundary)."""
        times = os.times()
        sample = {"t": time.monotonic(), "pair_process": times.user + times.system}
        for name, broker in self._brokers.items():
            sample[name] = broker.resources()["cpu_s"]
        sample["machine_busy"] = _machine_busy_s()
        self._marks.append(sample)

    def phases(self, names: list[str]) -> dict[str, dict[str, float]]:
        """Percent of one core per party between consecutive marks (machine: of all cores
        together, other processes on the machine included)."""
        out = {}
        for name, a, b in zip(names, self._marks, self._marks[1:], strict=False):
            seconds = max(b["t"] - a["t"], 1e-9)
            out[name] = {k: round(100 * (b[k] - a[k]) / seconds) for k in a if k != "t"}
        return out


def _start_hostiles(
    broker: Broker, connections: int, seconds: float, kinds: str, reopen: float, nice: int = 0
) -> subprocess.Popen[str]:
    args = [
        sys.executable, __file__, "--hostile-worker",
        "--port", str(broker.port), "--web-port", str(broker.web_port),
        "--connections", str(connections), "--seconds", str(seconds),
        "--kinds", kinds, "--reopen", str(reopen),
    ]  # fmt: skip
    # nice: the attack generator yields the CPU (attackers run on their own machines)
    return subprocess.Popen(
        args,
        stdout=subprocess.PIPE,
        text=True,
        preexec_fn=(lambda: os.nice(nice)) if nice else None,
    )


def run(args: argparse.Namespace) -> dict[str, Any]:
    """The soak: baseline, hostile, baseline; the figures."""
    with tempfile.TemporaryDirectory(prefix="hostile-soak-") as tmp:
        broker = Broker(Path(tmp), args.bcrypt_rounds, args.define)
        target = broker
        try:
            if args.hostile_target == "other":
                (Path(tmp) / "other").mkdir()
                target = Broker(Path(tmp) / "other", args.bcrypt_rounds, args.define)
            pair = Pair(broker.url, args.rate, Path(tmp) / "client.log")
            quarter = args.seconds / 4
            t0 = time.monotonic()
            marks = [t0 + quarter, t0 + 3 * quarter, t0 + args.seconds]
            pair_thread = threading.Thread(target=pair.run, args=(marks[2],))
            brokers = {"broker": broker}
            if target is not broker:
                brokers["attacked_broker"] = target
            cpu = CpuSplit(brokers)
            cpu.mark()
            pair_thread.start()
            time.sleep(max(0.0, marks[0] - time.monotonic()))
            cpu.mark()
            before = broker.resources()
            hostiles = _start_hostiles(
                target, args.connections, 2 * quarter, args.kinds, args.reopen, args.hostile_nice
            )
            time.sleep(max(0.0, marks[1] - 5 - time.monotonic()))
            during = broker.resources()
            time.sleep(max(0.0, marks[1] - time.monotonic()))
            cpu.mark()
            try:
                out, _ = hostiles.communicate(timeout=2 * quarter + 60)
            except subprocess.TimeoutExpired:
                hostiles.kill()
                out, _ = hostiles.communicate()
            time.sleep(max(0.0, marks[2] - time.monotonic()))
            cpu.mark()
            pair_thread.join(timeout=args.seconds + 120)
            after = broker.resources()
            lines = broker.log_lines()
            client_log = pair.log_path.read_text(errors="replace").splitlines()
        finally:
            broker.stop()
            if target is not broker:
                target.stop()
            if args.broker_log:
                Path(args.broker_log).write_bytes(broker.log_path.read_bytes())
    base = (pair.rate_between(t0, marks[0]) + pair.rate_between(marks[1], marks[2])) / 2
    hostile_rate = pair.rate_between(marks[0], marks[1])
    return {
        "seconds": args.seconds,
        "kinds": args.kinds,
        "rate": args.rate,
        "reopen": args.reopen,
        "connections": args.connections,
        "hostile_target": args.hostile_target,
        "hostile_nice": args.hostile_nice,
        "baseline_before_msg_s": round(pair.rate_between(t0, marks[0]), 1),
        "hostile_msg_s": round(hostile_rate, 1),
        "baseline_after_msg_s": round(pair.rate_between(marks[1], marks[2]), 1),
        "ratio": round(hostile_rate / base, 3) if base else None,
        "pair_errors": len(pair.errors),
        "pair_error_samples": pair.errors[:5],
        "pair_client_warnings": len(client_log),
        "pair_client_warning_samples": [line[:160] for line in client_log[:3]],
        "hostiles": [json.loads(line) for line in out.strip().splitlines()],
        "broker_before": before,
        "broker_during": during,
        "broker_after": after,
        "broker_log_lines": lines,
        "cpu_percent_of_a_core": cpu.phases(["baseline_before", "hostile", "baseline_after"]),
    }


def main() -> None:
    """Parse the command line and run the soak (or, internally, the hostile process)."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--seconds", type=float, default=600.0, help="whole run (default 600)")
    parser.add_argument("--connections", type=int, default=2000)
    parser.add_argument("--rate", type=float, default=0.0, help="producer msg/s cap (0: none)")
    parser.add_argument("--bcrypt-rounds", type=int, default=10)
    parser.add_argument(
        "--kinds", default=",".join(KINDS), help=f"comma-separated (default: {','.join(KINDS)})"
    )
    parser.add_argument(
        "--reopen", type=float, default=0.5, help="seconds before a closed hostile reconnects"
    )
    parser.add_argument(
        "-D", dest="define", action="append", default=[], help="broker setting key=value"
    )
    parser.add_argument("--broker-log", help="copy the broker's log to this file")
    parser.add_argument(
        "--hostile-target",
        choices=("same", "other"),
        default="same",
        help="other: a control run, the hostiles attack a second broker (same machine load, "
        "none on the pair's broker)",
    )
    parser.add_argument(
        "--hostile-nice",
        type=int,
        default=0,
        help="nice value of the attack generator (attackers run elsewhere in reality)",
    )
    parser.add_argument("--hostile-worker", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--port", type=int, help=argparse.SUPPRESS)
    parser.add_argument("--web-port", type=int, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.hostile_worker:
        hostile_main(args)
        return
    print(json.dumps(run(args), indent=2))


if __name__ == "__main__":
    main()
