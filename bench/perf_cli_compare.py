#!/usr/bin/env python3
"""``starquake perf produce`` beside the official client's load generators, on the same load.

For each scenario both sides publish the same number of messages of the same size with the
same batching settings and pending window (and, for the paced scenarios, the same rate) to a
fresh topic of one Starquake broker, in turn, ``--runs`` times; the table gives medians and
``perf/official`` ratios. The official side is:

- ``bench/perf_client.py`` (``import pulsar``) for the scenarios it has: ``produce-batched``,
  ``produce-unbatched`` and ``sync-latency``;
- for the paced scenarios, which perf_client.py has no rate option for, this script's own
  ``paced`` worker: the official client's ``send_async`` with a callback per message, paced the
  way ``starquake perf`` paces (every message due by now is sent, then it sleeps until the next
  is due), latency from the send call to the callback.

    .venv/bin/python bench/perf_cli_compare.py                 # 3 runs, about 3 minutes here
    .venv/bin/python bench/perf_cli_compare.py --runs 1 --scale 0.1
    .venv/bin/python bench/perf_cli_compare.py --json out.json
    .venv/bin/python bench/perf_cli_compare.py --service-url pulsar://127.0.0.1:6650
"""

from __future__ import annotations

import argparse
import functools
import json
import logging
import os
import shutil
import statistics
import subprocess
import sys
import threading
import time
import uuid
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from bench_common import align_columns, percentile
from compare import _spawn, _wait_ready, accepts, default_starquake_cmd, free_port, log

BENCH = Path(__file__).resolve().parent
Record = dict[str, Any]


@dataclass(frozen=True)
class Scenario:
    """One load: ``count`` messages of ``size`` bytes; ``rate`` 0 means as fast as possible."""

    name: str
    count: int
    size: int = 100
    rate: int = 0
    batching: bool = True
    batch_delay_ms: int = 10
    max_pending: int = 1000
    official: str = "paced"  # a perf_client.py scenario, or "paced" (this script's worker)
    metrics: tuple[str, ...] = ("msgs_per_s", "mb_per_s")


SCENARIOS = [
    # perf_client.py's own scenarios, at their settings
    Scenario("produce-batched", 200_000, official="produce-batched"),
    Scenario(
        "produce-unbatched",
        50_000,
        batching=False,
        max_pending=50_000,
        official="produce-unbatched",
    ),
    Scenario(
        "sync-latency",
        5_000,
        batching=False,
        max_pending=1,
        official="sync-latency",
        metrics=("msgs_per_s", "p50_ms", "p95_ms", "p99_ms"),
    ),
    # the same rate on both sides
    Scenario(
        "paced-batched-10k",
        50_000,
        rate=10_000,
        batch_delay_ms=1,
        metrics=("msgs_per_s", "mb_per_s", "p50_ms", "p95_ms", "p99_ms"),
    ),
    Scenario(
        "paced-unbatched-5k",
        25_000,
        rate=5_000,
        batching=False,
        max_pending=5_000,
        metrics=("msgs_per_s", "mb_per_s", "p50_ms", "p95_ms", "p99_ms"),
    ),
]


# --- the official client, paced -------------------------------------------------------------


def paced_main(argv: list[str]) -> int:
    """``paced``: the official client publishing at a fixed rate; one JSON line."""
    p = argparse.ArgumentParser(prog="perf_cli_compare.py paced")
    p.add_argument("--service-url", required=True)
    p.add_argument("--messages", type=int, required=True)
    p.add_argument("--rate", type=int, required=True)
    p.add_argument("--size", type=int, default=100)
    p.add_argument("--no-batching", action="store_true")
    p.add_argument("--batch-delay-ms", type=int, default=1)
    p.add_argument("--max-pending", type=int, default=1000)
    args = p.parse_args(argv)
    import pulsar

    client = pulsar.Client(
        args.service_url, operation_timeout_seconds=30, logger=logging.getLogger("pulsar")
    )
    producer = client.create_producer(
        f"persistent://public/default/perf-cmp-{uuid.uuid4().hex[:12]}",
        batching_enabled=not args.no_batching,
        batching_max_messages=1000,
        batching_max_allowed_size_in_bytes=128 * 1024,
        batching_max_publish_delay_ms=args.batch_delay_ms,
        max_pending_messages=args.max_pending,
        block_if_queue_full=True,
    )
    count, rate = args.messages, args.rate
    latencies = [0.0] * count
    state = {"done": 0, "failed": 0, "last_at": 0.0}
    finished = threading.Event()
    lock = threading.Lock()
    clock = time.perf_counter

    def callback(index: int, sent_at: float, result: Any, _msg_id: Any) -> None:
        now = clock()
        latencies[index] = now - sent_at
        with lock:
            state["done"] += 1
            state["last_at"] = now
            if result != pulsar.Result.Ok:
                state["failed"] += 1
            if state["done"] == count:
                finished.set()

    payload = os.urandom(args.size)
    send = producer.send_async
    start = clock()
    sent = 0
    while sent < count:
        due = min(int((clock() - start) * rate) + 1, count)
        if due <= sent:
            time.sleep(max((sent + 1) / rate - (clock() - start), 0))
            continue
        while sent < due:
            send(payload, functools.partial(callback, sent, clock()))
            sent += 1
    producer.flush()
    if not finished.wait(300):
        raise SystemExit(f"only {state['done']} of {count} callbacks")
    seconds = state["last_at"] - start
    ordered = sorted(latencies)
    record = {
        "messages": count,
        "failed": state["failed"],
        "seconds": round(seconds, 4),
        "msgs_per_s": round(count / seconds, 1),
        "mb_per_s": round(count * args.size / seconds / 1e6, 3),
        "p50_ms": round(percentile(ordered, 50) * 1e3, 3),
        "p95_ms": round(percentile(ordered, 95) * 1e3, 3),
        "p99_ms": round(percentile(ordered, 99) * 1e3, 3),
        "max_ms": round(ordered[-1] * 1e3, 3),
    }
    print(json.dumps(record), flush=True)
    sys.stdout.flush()
    os._exit(0)  # the C++ client may abort in its static destructors after async runs


# --- running both sides ----------------------------------------------------------------------


def _last_json(text: str) -> Record:
    for line in reversed(text.strip().splitlines()):
        if line.startswith("{"):
            record: Record = json.loads(line)
            return record
    raise ValueError(f"no JSON line in: {text[-500:]}")


def run_official(scenario: Scenario, url: str, timeout: float) -> Record:
    """One scenario with the official client (pulsar-perf or the paced sender); its figures."""
    python = sys.executable
    if scenario.official == "paced":
        command = [
            python, str(Path(__file__).resolve()), "paced",
            "--service-url", url, "--messages", str(scenario.count), "--rate", str(scenario.rate),
            "--size", str(scenario.size), "--batch-delay-ms", str(scenario.batch_delay_ms),
            "--max-pending", str(scenario.max_pending),
            *([] if scenario.batching else ["--no-batching"]),
        ]  # fmt: skip
    else:
        count_flag = {
            "produce-batched": "--batched-messages",
            "produce-unbatched": "--unbatched-messages",
            "sync-latency": "--sync-sends",
        }[scenario.official]
        command = [
            python, str(BENCH / "perf_client.py"), "--service-url", url,
            "--scenario", scenario.official, count_flag, str(scenario.count),
            "--size", str(scenario.size),
        ]  # fmt: skip
    done = subprocess.run(command, capture_output=True, text=True, timeout=timeout, cwd=BENCH)
    record = _last_json(done.stdout)
    if record.get("ok") is False or done.returncode:
        raise RuntimeError(f"official {scenario.name}: {record.get('error')} {done.stderr[-500:]}")
    return record


def run_perf(scenario: Scenario, url: str, starquake: str, timeout: float) -> Record:
    """One scenario with ``starquake perf``; its figures."""
    topic = f"persistent://public/default/perf-cli-{uuid.uuid4().hex[:12]}"
    command = [
        starquake, "perf", "produce", "--service-url", url, topic,
        "-r", str(scenario.rate), "-m", str(scenario.count), "-s", str(scenario.size),
        "--batch-max-messages", "1000", "--batch-time-window", str(scenario.batch_delay_ms),
        "--max-outstanding", str(scenario.max_pending), "--stats-interval-seconds", "3600",
        "--json", *([] if scenario.batching else ["--disable-batching"]),
    ]  # fmt: skip
    done = subprocess.run(command, capture_output=True, text=True, timeout=timeout)
    if done.returncode:
        raise RuntimeError(f"starquake perf {scenario.name}: {done.stderr[-500:]}")
    summary = _last_json(done.stdout)
    latency = summary["latency_ms"]
    return {
        **summary,
        "p50_ms": latency["p50"],
        "p95_ms": latency["p95"],
        "p99_ms": latency["p99"],
        "max_ms": latency["max"],
    }


def summarize(scenarios: list[Scenario], results: dict[str, dict[str, list[Record]]]) -> str:
    """The results of both tools side by side, as a text table."""
    lines: list[list[Any]] = [
        ["scenario", "metric", "official (median)", "perf (median)", "perf/official", "±20%"]
    ]
    for scenario in scenarios:
        sides = results[scenario.name]
        for metric in scenario.metrics:
            official = [r[metric] for r in sides["official"]]
            ours = [r[metric] for r in sides["perf"]]
            if not official or not ours:
                continue
            a, b = statistics.median(official), statistics.median(ours)
            ratio = b / a if a else float("nan")
            lines.append(
                [
                    scenario.name,
                    metric,
                    f"{a:,.3f} ({', '.join(f'{v:,.3g}' for v in official)})",
                    f"{b:,.3f} ({', '.join(f'{v:,.3g}' for v in ours)})",
                    f"{ratio:.2f}x",
                    "yes" if 0.8 <= ratio <= 1.2 else "no",
                ]
            )
    return align_columns(lines)


def start_broker(starquake: str) -> Any:
    """A Starquake broker on free loopback ports."""
    import tempfile

    workdir = Path(tempfile.mkdtemp(prefix="bench-perf-cli-"))
    port, web_port = free_port(), free_port()
    command = [
        starquake, "standalone", "--data-dir", str(workdir / "data"),
        "--broker-port", str(port), "--web-port", str(web_port),
        "--bind-address", "127.0.0.1", "--advertised-address", "127.0.0.1",
        "--log-level", "WARNING",
    ]  # fmt: skip
    broker = _spawn("starquake", command, workdir, port)
    _wait_ready(broker, lambda: accepts(port), timeout=60)
    return broker


def main(argv: list[str]) -> int:
    """Run the comparison and print its table."""
    if argv[:1] == ["paced"]:
        return paced_main(argv[1:])
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument("--runs", type=int, default=3)
    p.add_argument("--scale", type=float, default=1.0, help="multiply every message count")
    p.add_argument(
        "--scenario", action="append", choices=[s.name for s in SCENARIOS], help="repeatable"
    )
    p.add_argument("--service-url", help="use this broker instead of starting one")
    p.add_argument("--starquake-cmd", default=default_starquake_cmd())
    p.add_argument("--timeout", type=float, default=300, help="seconds per run")
    p.add_argument("--json", nargs="?", const="-", help="write the runs as JSON (- for stdout)")
    args = p.parse_args(argv)
    chosen = [s for s in SCENARIOS if not args.scenario or s.name in args.scenario]
    scenarios = [replace(s, count=max(1, int(s.count * args.scale))) for s in chosen]
    broker = None if args.service_url else start_broker(args.starquake_cmd)
    url = args.service_url or broker.service_url
    results: dict[str, dict[str, list[Record]]] = {
        s.name: {"official": [], "perf": []} for s in scenarios
    }
    failed = 0
    try:
        for run in range(args.runs):
            for scenario in scenarios:
                sides = ["official", "perf"] if run % 2 == 0 else ["perf", "official"]
                for side in sides:
                    try:
                        if side == "official":
                            record = run_official(scenario, url, args.timeout)
                        else:
                            record = run_perf(scenario, url, args.starquake_cmd, args.timeout)
                    except (RuntimeError, ValueError, subprocess.TimeoutExpired) as exc:
                        log(f"run {run + 1} {scenario.name} {side}: FAILED {exc}")
                        failed += 1
                        continue
                    results[scenario.name][side].append(record)
                    log(
                        f"run {run + 1} {scenario.name} {side}: {record['msgs_per_s']:,.0f} msg/s"
                        + (f", p50 {record['p50_ms']} ms" if "p50_ms" in record else "")
                    )
    finally:
        if broker is not None:
            broker.stop()
            shutil.rmtree(broker.workdir, ignore_errors=True)
    table = summarize(scenarios, results)
    if args.json:
        text = json.dumps({"url": url, "runs": args.runs, "results": results}, indent=1)
        if args.json == "-":
            print(text)
            print(table, file=sys.stderr)
        else:
            Path(args.json).write_text(text)
            print(table)
    else:
        print(table)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
