#!/usr/bin/env python3
"""Starquake's pure-Python client against the official ``pulsar-client``, same broker, one run.

Starts one Starquake broker (temp data dir, free ports on 127.0.0.1) and runs every scenario
``--runs`` times with each client, alternating which client goes first, then prints per
scenario the medians, the ratio ours/official and the targets of the issue.

    .venv/bin/python bench/client_compare.py                        # 3 runs, default sizes
    .venv/bin/python bench/client_compare.py --scale 0.1 --runs 1   # quick smoke run
    .venv/bin/python bench/client_compare.py --json out.json        # also write the record
    .venv/bin/python bench/client_compare.py --service-url pulsar://127.0.0.1:6650  # own broker

The two clients expose the same API; only the module differs (``pulsar`` or
``starquake.client``). Every scenario runs in a fresh process that imports just one of them:

    .venv/bin/python bench/client_compare.py worker --module starquake.client \\
        --scenario produce-batched --service-url pulsar://127.0.0.1:6650 --messages 100000

prints one JSON line (handy under ``py-spy record -- ...`` or ``pyinstrument``). The backlog
of ``consume-backlog`` is always written by the official client (a separate ``preproduce``
worker), so both clients read the same kind of entries.
"""

from __future__ import annotations

import argparse
import importlib
import json
import logging
import os
import struct
import subprocess
import sys
import time
import uuid
from pathlib import Path
from types import ModuleType
from typing import Any

from bench_brokers import (
    default_starquake_cmd,
    log,
    machine_info,
    start_standalone,
    stop_broker,
)
from bench_common import (
    Metric,
    add_json_option,
    align_columns,
    drain_distinct,
    format_cell,
    latency_figures,
    print_report,
    produce_async,
    run_stats,
    timed_sends,
)

BENCH = Path(__file__).resolve().parent

Record = dict[str, Any]

OFFICIAL = "official"
OURS = "starquake"
MODULES = {OFFICIAL: "pulsar", OURS: "starquake.client"}
CLIENTS = (OFFICIAL, OURS)

_U32 = struct.Struct(">I")


# =========================================================================== worker side
#
# Everything below up to the "driver side" marker runs in the per-scenario subprocess. It
# imports only the module under test (``pulsar`` or ``starquake.client``), never both.


def _figures(count: int, seconds: float, cpu: float) -> Record:
    return {
        "messages": count,
        "seconds": round(seconds, 4),
        "msgs_per_s": round(count / seconds, 1),
        "client_cpu_s": round(cpu, 3),
        "client_cpu_us_per_msg": round(cpu / count * 1e6, 2),
    }


def _client(pulsar: ModuleType, args: argparse.Namespace) -> Any:
    return pulsar.Client(
        args.service_url, operation_timeout_seconds=30, logger=logging.getLogger("pulsar")
    )


def w_produce(pulsar: ModuleType, args: argparse.Namespace, batched: bool) -> Record:
    """send_async a fresh topic full, batched or not; throughput and client CPU."""
    client = _client(pulsar, args)
    try:
        producer = client.create_producer(
            args.topic or f"persistent://public/default/cc-{uuid.uuid4().hex[:12]}",
            batching_enabled=batched,
            block_if_queue_full=True,
            max_pending_messages=args.max_pending,
        )
        payloads = [b"x" * args.size] * args.messages
        seconds, cpu = produce_async(producer, payloads, pulsar.Result.Ok, args.timeout)
        producer.close()
        figures = _figures(args.messages, seconds, cpu)
        figures["max_pending_messages"] = args.max_pending
        return figures
    finally:
        client.close()


def w_preproduce(pulsar: ModuleType, args: argparse.Namespace) -> Record:
    """Create the subscription (Earliest), then write a numbered, batched backlog."""
    client = _client(pulsar, args)
    try:
        client.subscribe(
            args.topic,
            args.subscription,
            consumer_type=pulsar.ConsumerType.Exclusive,
            initial_position=pulsar.InitialPosition.Earliest,
        ).close()
        producer = client.create_producer(
            args.topic,
            batching_enabled=True,
            block_if_queue_full=True,
            max_pending_messages=args.max_pending,
        )
        filler = b"x" * max(0, args.size - 4)
        payloads = [_U32.pack(i) + filler for i in range(args.messages)]
        seconds, cpu = produce_async(producer, payloads, pulsar.Result.Ok, args.timeout)
        producer.close()
        return _figures(args.messages, seconds, cpu)
    finally:
        client.close()


def w_consume(pulsar: ModuleType, args: argparse.Namespace) -> Record:
    """Receive and ack the pre-produced backlog; count distinct messages (by payload index)."""
    client = _client(pulsar, args)
    try:
        count = args.messages
        consumer = client.subscribe(
            args.topic,
            args.subscription,
            consumer_type=pulsar.ConsumerType.Exclusive,
            initial_position=pulsar.InitialPosition.Earliest,
            receiver_queue_size=args.receiver_queue_size,
        )
        drained = drain_distinct(consumer, count, pulsar.Timeout)
        consumer.close()
        figures = _figures(count, drained.seconds, drained.cpu)
        figures.update(drained.figures(count))
        return figures
    finally:
        client.close()


def w_sync_latency(pulsar: ModuleType, args: argparse.Namespace) -> Record:
    """Blocking send() calls one at a time, batching off; latency percentiles."""
    client = _client(pulsar, args)
    try:
        producer = client.create_producer(
            f"persistent://public/default/cc-sl-{uuid.uuid4().hex[:12]}", batching_enabled=False
        )
        latencies, cpu = timed_sends(producer.send, b"x" * args.size, args.warmup, args.messages)
        producer.close()
        figures = latency_figures(latencies, 50, 99)
        figures["client_cpu_us_per_msg"] = round(cpu / len(latencies) * 1e6, 2)
        return figures
    finally:
        client.close()


WORKERS = {
    "produce-batched": lambda p, a: w_produce(p, a, batched=True),
    "produce-unbatched": lambda p, a: w_produce(p, a, batched=False),
    "preproduce": w_preproduce,
    "consume-backlog": w_consume,
    "sync-latency": w_sync_latency,
}


def worker_main(argv: list[str]) -> int:
    """The worker process: run one scenario with one client module, print its JSON."""
    p = argparse.ArgumentParser(prog="client_compare.py worker")
    p.add_argument("--module", required=True, choices=sorted(MODULES.values()))
    p.add_argument("--scenario", required=True, choices=list(WORKERS))
    p.add_argument("--service-url", required=True)
    p.add_argument("--messages", type=int, required=True)
    p.add_argument("--size", type=int, default=100)
    p.add_argument("--topic", default="")
    p.add_argument("--subscription", default="bench-sub")
    p.add_argument("--max-pending", type=int, default=1000)
    p.add_argument("--receiver-queue-size", type=int, default=1000)
    p.add_argument("--warmup", type=int, default=200)
    p.add_argument("--timeout", type=float, default=600, help="seconds to wait for callbacks")
    args = p.parse_args(argv)
    logging.basicConfig(level=logging.WARNING, stream=sys.stderr)
    line: Record = {"scenario": args.scenario, "module": args.module}
    try:
        pulsar = importlib.import_module(args.module)
    except Exception as exc:  # the client is being edited concurrently: let the driver retry
        line.update(ok=False, phase="import", error=f"{type(exc).__name__}: {exc}")
        print(json.dumps(line), flush=True)
        return 1
    try:
        line.update(WORKERS[args.scenario](pulsar, args))
        line["ok"] = True
    except Exception as exc:
        line.update(ok=False, phase="run", error=f"{type(exc).__name__}: {exc}")
    print(json.dumps(line), flush=True)
    return 0 if line["ok"] else 1


# =========================================================================== driver side


CPU = Metric("client_cpu_us_per_msg", higher_is_better=False)
BROKER_CPU = Metric("broker_cpu_us_per_msg", higher_is_better=False)
SCENARIO_METRICS: dict[str, tuple[Metric, ...]] = {
    "produce-batched": (Metric("msgs_per_s", True, 0.5), CPU, BROKER_CPU),
    "produce-unbatched": (Metric("msgs_per_s", True, 0.7), CPU, BROKER_CPU),
    "consume-backlog": (Metric("msgs_per_s", True, 0.5), CPU),
    "sync-latency": (Metric("p50_ms", False), Metric("p99_ms", False), CPU),
}
SCENARIOS = tuple(SCENARIO_METRICS)


def _scaled(args: argparse.Namespace, n: int) -> int:
    return max(1, int(n * args.scale))


def _worker(
    args: argparse.Namespace, service_url: str, module: str, scenario: str, *extra: str
) -> Record:
    """Run one worker process; its JSON line (or a failure record), plus wall time."""
    command = [
        sys.executable,
        str(Path(__file__).resolve()),
        "worker",
        f"--module={module}",
        f"--scenario={scenario}",
        f"--service-url={service_url}",
        f"--size={args.size}",
        *extra,
    ]
    started = time.monotonic()
    try:
        done = subprocess.run(
            command, capture_output=True, text=True, timeout=args.scenario_timeout, check=False
        )
    except subprocess.TimeoutExpired:
        return {"scenario": scenario, "ok": False, "error": "worker timed out"}
    record: Record | None = None
    for line in done.stdout.splitlines():
        if line.startswith("{"):
            record = json.loads(line)
    if record is None:
        tail = (done.stderr or done.stdout or f"exit {done.returncode}")[-1500:]
        record = {"scenario": scenario, "ok": False, "phase": "crash"}
        record["error"] = f"no result: {tail}"
    record["wall_s"] = round(time.monotonic() - started, 2)
    if done.returncode not in (0, 1):
        record["exit_code"] = done.returncode  # e.g. -6: abort at interpreter exit
    return record


def run_one(
    args: argparse.Namespace, service_url: str, broker: Any, client: str, scenario: str
) -> Record:
    """One scenario with one client; import failures are retried after a pause."""
    module = MODULES[client]
    for attempt in range(args.retries + 1):
        cpu0 = broker.cpu_seconds() if broker else None
        if scenario == "produce-batched":
            rec = _worker(
                args, service_url, module, scenario, f"--messages={_scaled(args, args.batched)}"
            )
        elif scenario == "produce-unbatched":
            rec = _worker(
                args,
                service_url,
                module,
                scenario,
                f"--messages={_scaled(args, args.unbatched)}",
                f"--max-pending={args.unbatched_max_pending}",
            )
        elif scenario == "consume-backlog":
            n = _scaled(args, args.backlog)
            topic = f"persistent://public/default/cc-cb-{uuid.uuid4().hex[:12]}"
            pre = _worker(
                args,
                service_url,
                MODULES[OFFICIAL],
                "preproduce",
                f"--messages={n}",
                f"--topic={topic}",
                "--max-pending=10000",
            )
            if not pre.get("ok"):
                rec = {**pre, "scenario": scenario, "error": f"preproduce: {pre.get('error')}"}
            else:
                cpu0 = broker.cpu_seconds() if broker else None
                rec = _worker(
                    args,
                    service_url,
                    module,
                    scenario,
                    f"--messages={n}",
                    f"--topic={topic}",
                    f"--receiver-queue-size={args.receiver_queue_size}",
                )
                rec["backlog_produce_msgs_per_s"] = pre.get("msgs_per_s")
        else:
            rec = _worker(
                args, service_url, module, scenario, f"--messages={_scaled(args, args.sync_sends)}"
            )
        # Broker CPU per message of the timed worker (for consume-backlog: the consume worker
        # only). Left out of sync-latency, where warm-up and topic creation would dominate.
        measured = scenario != "sync-latency" and rec.get("ok") and rec.get("messages")
        if broker is not None and cpu0 is not None and measured:
            rec["broker_cpu_us_per_msg"] = round(
                (broker.cpu_seconds() - cpu0) / rec["messages"] * 1e6, 2
            )
        rec["attempt"] = attempt + 1
        if rec.get("ok") or rec.get("phase") != "import" or attempt == args.retries:
            return rec
        log(f"{client} {scenario}: import failed ({rec.get('error')}); retrying in 20 s")
        time.sleep(20)
    raise AssertionError("unreachable")


def _brief(rec: Record) -> str:
    if not rec.get("ok"):
        return f"FAILED {str(rec.get('error', ''))[:300]}"
    keys = ("msgs_per_s", "p50_ms", "p99_ms", "client_cpu_us_per_msg", "broker_cpu_us_per_msg")
    return " ".join(f"{k}={rec[k]}" for k in keys if k in rec)


def run_all(args: argparse.Namespace, service_url: str, broker: Any) -> dict[str, list[Record]]:
    """Every scenario x run x client; client order alternates from run to run."""
    chosen = [s for s in SCENARIOS if not args.scenario or s in args.scenario]
    results: dict[str, list[Record]] = {f"{c}/{s}": [] for c in CLIENTS for s in chosen}
    for run in range(args.runs):
        order = CLIENTS if run % 2 == 0 else CLIENTS[::-1]
        for scenario in chosen:
            for client in order:
                if broker is not None and not broker.alive():
                    rec: Record = {"scenario": scenario, "ok": False, "error": "broker down"}
                else:
                    rec = run_one(args, service_url, broker, client, scenario)
                rec["run"] = run
                results[f"{client}/{scenario}"].append(rec)
                log(f"run {run + 1}/{args.runs} {client:<9} {scenario:<17} {_brief(rec)}")
    return results


def summarize(results: dict[str, list[Record]]) -> list[Record]:
    """Per scenario metric: median (and spread) per client, ratio ours/official, verdict."""
    rows: list[Record] = []
    for scenario, metrics in SCENARIO_METRICS.items():
        if f"{OURS}/{scenario}" not in results:
            continue
        for metric in metrics:
            row: Record = {"scenario": scenario, "metric": metric.key}
            for client in CLIENTS:
                runs = results[f"{client}/{scenario}"]
                row[client] = run_stats(runs, metric.key)
            ours, official = row[OURS]["median"], row[OFFICIAL]["median"]
            if ours is not None and official:
                row["ratio"] = round(ours / official, 3)
                if metric.target is not None:
                    row["met"] = metric.met(ours / official)
            if metric.target is not None:
                row["target"] = metric.target_text()
                row.setdefault("met", False)  # a side without a figure is not a met target
            rows.append(row)
    return rows


def render_table(rows: list[Record]) -> str:
    """The summary rows as a text table."""
    header = ["scenario", "metric", OFFICIAL, OURS, "ours/official", "target", "status"]
    lines = [header]
    for row in rows:
        status = ("met" if row["met"] else "MISSED") if "met" in row else ""
        lines.append(
            [
                row["scenario"],
                row["metric"],
                format_cell(row[OFFICIAL]),
                format_cell(row[OURS]),
                f"{row['ratio']:.2f}x" if "ratio" in row else "",
                row.get("target", ""),
                status,
            ]
        )
    return align_columns(lines)


def start_broker(args: argparse.Namespace) -> Any:
    """A Starquake broker on free loopback ports; ready once it is healthy and accepts."""
    extra = ["--bind-address", "127.0.0.1", "--log-level", "WARNING"]
    return start_standalone(
        args.starquake_cmd, "bench-client-compare-", extra + args.starquake_args.split()
    )


def parse_args(argv: list[str]) -> argparse.Namespace:
    """The driver's command line."""
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument("--runs", type=int, default=3, help="runs per scenario and client")
    p.add_argument(
        "--scenario", action="append", choices=SCENARIOS, help="limit to this scenario; repeatable"
    )
    p.add_argument("--scale", type=float, default=1.0, help="multiply every message count")
    p.add_argument("--batched", type=int, default=100_000, help="produce-batched messages")
    p.add_argument("--unbatched", type=int, default=20_000, help="produce-unbatched messages")
    p.add_argument("--backlog", type=int, default=100_000, help="consume-backlog messages")
    p.add_argument("--sync-sends", type=int, default=2_000, help="sync-latency send() calls")
    p.add_argument("--size", type=int, default=100, help="payload bytes (>= 4)")
    p.add_argument("--unbatched-max-pending", type=int, default=50_000)
    p.add_argument("--receiver-queue-size", type=int, default=1_000)
    p.add_argument("--scenario-timeout", type=float, default=300, help="seconds per worker")
    p.add_argument("--retries", type=int, default=2, help="retries of a worker whose import fails")
    p.add_argument("--service-url", help="use this broker instead of starting one")
    p.add_argument("--starquake-cmd", default=default_starquake_cmd())
    p.add_argument(
        "--starquake-args",
        default="--advertised-address 127.0.0.1",
        help="extra arguments after the standalone command",
    )
    p.add_argument("--keep", action="store_true", help="keep the broker's temp dir")
    add_json_option(p)
    args = p.parse_args(argv)
    if args.size < 4:
        p.error("--size must be at least 4 (consume-backlog numbers its payloads)")
    return args


def main(argv: list[str]) -> int:
    """Run the comparison and print its table; 1 if any run failed."""
    args = parse_args(argv)
    info = machine_info()
    began = time.monotonic()
    broker = None
    try:
        if args.service_url:
            service_url = args.service_url
        else:
            broker = start_broker(args)
            service_url = broker.service_url
        results = run_all(args, service_url, broker)
        peak_rss = broker.peak_rss_mb() if broker else None
    finally:
        if broker is not None:
            stop_broker(broker, args.keep)
    rows = summarize(results)
    record: Record = {
        "machine": info,
        "elapsed_s": round(time.monotonic() - began, 1),
        "settings": {k: v for k, v in vars(args).items() if k != "json"},
        "modules": MODULES,
        "broker": {"command": broker.command if broker else None, "peak_rss_mb": peak_rss},
        "summary": rows,
        "runs": results,
    }
    footer = (
        f"runs={args.runs} scale={args.scale} elapsed={record['elapsed_s']}s "
        f"{info['date']}; medians, ±half the min-max spread; ours = {MODULES[OURS]}, "
        f"official = pulsar-client {info['pulsar_client']}"
    )
    print_report(render_table(rows), footer, record, args.json)
    failures = sum(row[c]["failed"] for row in rows for c in CLIENTS)
    return 1 if failures else 0


if __name__ == "__main__":
    if sys.argv[1:2] == ["worker"]:
        code = worker_main(sys.argv[2:])
        sys.stdout.flush()
        sys.stderr.flush()
        # The official client can abort in its static destructors after large async runs
        # ("terminate called without an active exception"); the figures are already out.
        os._exit(code)
    sys.exit(main(sys.argv[1:]))
