"""Does a storm of wrong credentials slow down the broker's good clients?

Starts ``starquake standalone`` (token and basic authentication on, a bcrypt htpasswd of cost
12) on free loopback ports, then for each storm kind:

1. a good client (the official ``pulsar-client``, token authentication) produces and consumes
   one message at a time for ``--seconds``: the baseline round trips per second;
2. the same while another process opens connections as fast as ``--concurrency`` allows, each
   sending one CONNECT with wrong credentials and waiting for the broker's ERROR (at most
   ``--max-attempts`` attempts and ``--seconds`` + 5 s);
3. prints both rates, their ratio, the round-trip p50/p99/max, and the storm's attempts per
   second.

Storm kinds: ``token`` (tokens signed with another key, and garbage), ``bcrypt`` (a real user
with random wrong passwords: every attempt would cost a bcrypt check), ``unknown-user`` (basic
credentials of users that do not exist).

``--timing N`` instead answers whether the time of a refusal tells user names apart: it times
N one-at-a-time wrong-password CONNECTs for the known user and N for unknown users (distinct
passwords and names, so that no cached verdict answers), and prints both means and their
ratio (1.0: indistinguishable).

    .venv/bin/python bench/auth_storm.py [--seconds 5] [--concurrency 64] [--storm token]
    .venv/bin/python bench/auth_storm.py --timing 20
"""

from __future__ import annotations

import argparse
import asyncio
import base64
import json
import os
import secrets
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path
from typing import Any

STORMS = ("token", "bcrypt", "unknown-user")


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def _percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q / 100 * len(ordered)))]


# --- the broker ------------------------------------------------------------------------------


class Broker:
    """``starquake standalone`` with authentication, in a temporary directory."""

    def __init__(self, directory: Path) -> None:
        from passlib.hash import bcrypt

        self.key = secrets.token_bytes(32)
        (directory / "secret.key").write_bytes(self.key)
        (directory / "htpasswd").write_text(f"user:{bcrypt.using(rounds=12).hash('right')}\n")
        self.port, self.web_port = _free_port(), _free_port()
        settings = {
            "authenticationEnabled": "true",
            "authenticationProviders": "token,basic",
            "tokenSecretKey": f"file://{directory / 'secret.key'}",
            "basicAuthConf": str(directory / "htpasswd"),
        }
        args = [
            sys.executable, "-m", "starquake.cli.main", "standalone",
            "--data-dir", str(directory / "data"),
            "--broker-port", str(self.port), "--web-port", str(self.web_port),
            "--bind-address", "127.0.0.1", "--advertised-address", "127.0.0.1",
            "--log-level", "WARNING",
        ]  # fmt: skip
        for key, value in settings.items():
            args += ["-D", f"{key}={value}"]
        self.log = (directory / "broker.log").open("wb")
        self.process = subprocess.Popen(args, stdout=self.log, stderr=subprocess.STDOUT)
        self._wait_ready()

    @property
    def url(self) -> str:
        """The broker's pulsar:// URL."""
        return f"pulsar://127.0.0.1:{self.port}"

    def token(self, role: str) -> str:
        """A token for ``role`` signed with the broker's secret key."""
        import jwt

        return jwt.encode({"sub": role}, self.key, algorithm="HS256")

    def _wait_ready(self) -> None:
        deadline = time.monotonic() + 30
        request = urllib.request.Request(
            f"http://127.0.0.1:{self.web_port}/admin/v2/brokers/health",
            headers={"Authorization": f"Bearer {self.token('bench')}"},
        )
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                raise RuntimeError("the broker exited; see its log")
            try:
                with urllib.request.urlopen(request, timeout=2) as reply:
                    if reply.status == 200:
                        return
            except OSError:
                time.sleep(0.1)
        raise RuntimeError("the broker did not become ready")

    def stop(self) -> None:
        """Stop the broker (SIGTERM, then SIGKILL after 30 s)."""
        self.process.terminate()
        try:
            self.process.wait(timeout=30)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait()
        self.log.close()


# --- the good client ----------------------------------------------------------------------------


def round_trips(client: Any, topic: str, seconds: float) -> list[float]:
    """Produce and consume one message at a time for ``seconds``; each round trip's seconds."""
    consumer = client.subscribe(topic, "bench")
    producer = client.create_producer(topic)
    times: list[float] = []
    deadline = time.monotonic() + seconds
    n = 0
    while time.monotonic() < deadline:
        started = time.perf_counter()
        producer.send(b"%d" % n)
        consumer.acknowledge(consumer.receive(timeout_millis=30000))
        times.append(time.perf_counter() - started)
        n += 1
    producer.close()
    consumer.close()
    return times


# --- the storm (a separate process) ------------------------------------------------------------


def _credentials(kind: str, i: int, wrong_key: bytes) -> tuple[str, bytes]:
    if kind == "token":
        if i % 2:
            return "token", os.urandom(48)
        header = base64.urlsafe_b64encode(b'{"alg":"HS256"}').rstrip(b"=")
        body = base64.urlsafe_b64encode(b'{"sub":"attacker-%d"}' % i).rstrip(b"=")
        import hashlib
        import hmac

        sig = hmac.new(wrong_key, header + b"." + body, hashlib.sha256).digest()
        return "token", header + b"." + body + b"." + base64.urlsafe_b64encode(sig).rstrip(b"=")
    if kind == "bcrypt":
        return "basic", b"user:" + secrets.token_hex(8).encode()
    return "basic", b"nobody-%d:password" % i


async def _attempt(port: int, method: str, data: bytes) -> int:
    from starquake.protocol._generated import starquake_wire_pb2 as pb
    from starquake.protocol.framing import FrameDecoder, encode_command

    T = pb.BaseCommand
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    try:
        cmd = T(type=T.CONNECT)
        cmd.connect.client_version = "storm"
        cmd.connect.protocol_version = 20
        cmd.connect.auth_method_name = method
        cmd.connect.auth_data = data
        writer.write(encode_command(cmd))
        decoder = FrameDecoder()
        async with asyncio.timeout(30):
            while chunk := await reader.read(65536):
                for frame in decoder.feed(chunk):
                    if frame.command.type == T.ERROR:
                        return int(frame.command.error.error)
                    if frame.command.type == T.CONNECTED:
                        return -1
        return -2
    finally:
        writer.close()


async def _storm(
    port: int, kind: str, seconds: float, concurrency: int, max_attempts: int
) -> dict[str, Any]:
    wrong_key = secrets.token_bytes(32)
    deadline = time.monotonic() + seconds
    outcomes: dict[str, int] = {}
    attempts = 0

    async def worker() -> None:
        nonlocal attempts
        while time.monotonic() < deadline and attempts < max_attempts:
            i = attempts
            attempts += 1
            method, data = _credentials(kind, i, wrong_key)
            try:
                code = str(await _attempt(port, method, data))
            except (OSError, TimeoutError) as exc:
                code = type(exc).__name__
            outcomes[code] = outcomes.get(code, 0) + 1

    started = time.monotonic()
    await asyncio.gather(*(worker() for _ in range(concurrency)))
    elapsed = time.monotonic() - started
    return {"attempts": attempts, "seconds": elapsed, "outcomes": outcomes}


def storm_main(args: argparse.Namespace) -> None:
    """The storm process: run one storm and print its figures as JSON."""
    result = asyncio.run(
        _storm(args.port, args.kind, args.seconds, args.concurrency, args.max_attempts)
    )
    print(json.dumps(result), flush=True)


# --- the comparison -------------------------------------------------------------------------------


def measure(broker: Broker, kind: str, args: argparse.Namespace) -> dict[str, Any]:
    """Round trips of a good client alone, then while a storm of ``kind`` runs."""
    import pulsar

    client = pulsar.Client(
        broker.url,
        authentication=pulsar.AuthenticationToken(broker.token("good")),
        operation_timeout_seconds=30,
        logger=pulsar.ConsoleLogger(pulsar.LoggerLevel.Error),
    )
    try:
        baseline = round_trips(client, f"baseline-{kind}-{secrets.token_hex(4)}", args.seconds)
        storm = subprocess.Popen(
            [
                sys.executable,
                __file__,
                "--storm-worker",
                "--port",
                str(broker.port),
                "--kind",
                kind,
                "--seconds",
                str(args.seconds + 2),
                "--concurrency",
                str(args.concurrency),
                "--max-attempts",
                str(args.max_attempts),
            ],
            stdout=subprocess.PIPE,
            text=True,
        )
        time.sleep(1.0)  # let the storm get going
        during = round_trips(client, f"storm-{kind}-{secrets.token_hex(4)}", args.seconds)
        out, _ = storm.communicate(timeout=args.seconds + 60)
        storm_result = json.loads(out)
    finally:
        client.close()
    rate = len(baseline) / args.seconds
    storm_rate = len(during) / args.seconds
    return {
        "storm": kind,
        "baseline_round_trips_per_s": round(rate, 1),
        "storm_round_trips_per_s": round(storm_rate, 1),
        "ratio": round(storm_rate / rate, 3) if rate else None,
        "baseline_p50_ms": round(_percentile(baseline, 50) * 1e3, 2),
        "storm_p50_ms": round(_percentile(during, 50) * 1e3, 2),
        "storm_p99_ms": round(_percentile(during, 99) * 1e3, 2),
        "storm_max_ms": round(max(during) * 1e3, 2),
        "storm_attempts": storm_result["attempts"],
        "storm_attempts_per_s": round(storm_result["attempts"] / storm_result["seconds"], 1),
        "storm_outcomes": storm_result["outcomes"],
    }


async def _mean_refusal_seconds(port: int, users: list[bytes]) -> float:
    """Mean seconds of one wrong-password CONNECT per entry of ``users``, one at a time."""
    total = 0.0
    for user in users:
        started = time.perf_counter()
        await _attempt(port, "basic", user + b":" + secrets.token_hex(8).encode())
        total += time.perf_counter() - started
    return total / len(users)


def timing(broker: Broker, count: int) -> dict[str, Any]:
    """Refusal times of a known user's and of unknown users' wrong passwords."""
    known = asyncio.run(_mean_refusal_seconds(broker.port, [b"user"] * count))
    unknown_names = [b"nobody-%d" % i for i in range(count)]
    unknown = asyncio.run(_mean_refusal_seconds(broker.port, unknown_names))
    known_ms, unknown_ms = known * 1e3, unknown * 1e3
    return {
        "attempts_each": count,
        "known_user_ms": round(known_ms, 1),
        "unknown_user_ms": round(unknown_ms, 1),
        "unknown_over_known": round(unknown_ms / known_ms, 3) if known_ms > 0 else None,
    }


def main() -> None:
    """Run the measurements and print their comparison."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--seconds", type=float, default=5.0, help="each measurement's length")
    parser.add_argument("--concurrency", type=int, default=64, help="storm connections at once")
    parser.add_argument("--max-attempts", type=int, default=200_000, help="storm attempts at most")
    parser.add_argument("--storm", action="append", choices=STORMS, help="storm kinds (all)")
    parser.add_argument("--json", action="store_true", help="one JSON line per storm")
    parser.add_argument(
        "--timing", type=int, default=0, help="time N refusals of known and unknown users"
    )
    parser.add_argument("--storm-worker", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--port", type=int, help=argparse.SUPPRESS)
    parser.add_argument("--kind", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.storm_worker:
        storm_main(args)
        return
    with tempfile.TemporaryDirectory(prefix="auth-storm-") as tmp:
        broker = Broker(Path(tmp))
        try:
            if args.timing:
                print(json.dumps(timing(broker, args.timing)), flush=True)
                return
            for kind in args.storm or STORMS:
                result = measure(broker, kind, args)
                if args.json:
                    print(json.dumps(result), flush=True)
                else:
                    print(
                        f"{kind:13} good client {result['baseline_round_trips_per_s']:8.1f} rt/s "
                        f"alone, {result['storm_round_trips_per_s']:8.1f} rt/s during the storm "
                        f"(ratio {result['ratio']}); p50 {result['baseline_p50_ms']} -> "
                        f"{result['storm_p50_ms']} ms, p99 {result['storm_p99_ms']} ms, max "
                        f"{result['storm_max_ms']} ms; storm {result['storm_attempts']} attempts "
                        f"({result['storm_attempts_per_s']}/s) {result['storm_outcomes']}",
                        flush=True,
                    )
        finally:
            broker.stop()


if __name__ == "__main__":
    main()
