#!/usr/bin/env python3
"""Starquake against pulsar-lite, same machine, same client, one run.

Starts both brokers (temp data dirs, free ports on 127.0.0.1), runs every scenario
``--runs`` times against each, alternating which broker goes first, stops them, and prints
per scenario the medians, the ratio Starquake/pulsar-lite and the targets of the issue.

    .venv/bin/python bench/compare.py                      # both brokers, 3 runs
    .venv/bin/python bench/compare.py --only pulsar-lite   # one side only
    .venv/bin/python bench/compare.py --scale 0.1 --runs 1 # quick smoke run
    .venv/bin/python bench/compare.py --json out.json      # also write the record

Each scenario is a separate client process (bench/perf_client.py or bench/replay_send.py),
so no client state carries over. The broker's CPU time during each scenario is read from
/proc and reported per message: a client-independent measure of broker cost.
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import subprocess
import sys
import tempfile
import time
import zipfile
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from bench_brokers import (
    Broker,
    accepts,
    default_starquake_cmd,
    free_port,
    log,
    machine_info,
    spawn,
    start_standalone,
    stop_broker,
    wait_ready,
)
from bench_common import (
    Metric,
    add_json_option,
    align_columns,
    format_cell,
    print_report,
    run_stats,
)

BENCH = Path(__file__).resolve().parent
CACHE = BENCH / ".cache"
RESULTS = BENCH / "results"
PULSAR_LITE_VERSION = "0.2.0"
STARQUAKE = "starquake"
PULSAR_LITE = "pulsar-lite"
BROKERS = (STARQUAKE, PULSAR_LITE)

Record = dict[str, Any]


# --------------------------------------------------------------------------- scenarios


@dataclass(frozen=True)
class Scenario:
    """One client scenario: its script, its arguments and the figures it is judged on."""

    name: str
    script: str
    argv: Callable[[argparse.Namespace], list[str]]
    metrics: tuple[Metric, ...]
    messages: Callable[[Record], int] = field(default=lambda r: int(r.get("messages", 0)))


def _scaled(args: argparse.Namespace, n: int) -> str:
    return str(max(1, int(n * args.scale)))


CPU = Metric("broker_cpu_us_per_msg", higher_is_better=False)

SCENARIOS: tuple[Scenario, ...] = (
    Scenario(
        "produce-batched",
        "perf_client.py",
        lambda a: [
            "--scenario=produce-batched",
            f"--callbacks={a.callbacks}",
            f"--batched-messages={_scaled(a, a.batched_messages)}",
        ],
        (Metric("msgs_per_s", True, 1.0), CPU),
    ),
    Scenario(
        "produce-unbatched",
        "perf_client.py",
        lambda a: [
            "--scenario=produce-unbatched",
            f"--callbacks={a.callbacks}",
            f"--unbatched-messages={_scaled(a, a.unbatched_messages)}",
        ],
        (Metric("msgs_per_s", True, 0.8), CPU),
    ),
    Scenario(
        "consume-backlog",
        "perf_client.py",
        lambda a: [
            "--scenario=consume-backlog",
            f"--backlog-messages={_scaled(a, a.backlog_messages)}",
            f"--subscription-type={a.subscription_type}",
        ],
        (Metric("msgs_per_s", True, 1.0),),
    ),
    Scenario(
        "sync-latency",
        "perf_client.py",
        lambda a: ["--scenario=sync-latency", f"--sync-sends={_scaled(a, a.sync_sends)}"],
        (
            Metric("p50_ms", False),
            Metric("p95_ms", False),
            Metric("p99_ms", False, 1.2),
            Metric("max_ms", False),
        ),
    ),
    Scenario(
        "replay-unbatched",
        "replay_send.py",
        lambda a: [f"--frames={_scaled(a, a.replay_frames)}", "--batch-size=1"],
        (Metric("entries_per_s", True), CPU),
    ),
    Scenario(
        "replay-batched",
        "replay_send.py",
        lambda a: [
            f"--frames={_scaled(a, a.replay_batched_frames)}",
            f"--batch-size={a.replay_batch_size}",
        ],
        (Metric("msgs_per_s", True), Metric("entries_per_s", True), CPU),
    ),
)


# --------------------------------------------------------------------------- brokers


def ensure_pulsar_lite(version: str) -> Path:
    """The pulsar-lite binary from its PyPI wheel, downloaded into bench/.cache if missing."""
    binary = CACHE / f"pulsar-lite-{version}" / "pulsar-lite"
    if binary.is_file():
        return binary
    CACHE.mkdir(parents=True, exist_ok=True)
    wheels = sorted(CACHE.glob(f"pulsar_lite-{version}-*.whl"))
    if not wheels:
        log(f"downloading pulsar-lite=={version} into {CACHE}")
        subprocess.run(
            [
                *(sys.executable, "-m", "pip", "download", f"pulsar-lite=={version}"),
                *("--no-deps", "--only-binary=:all:", "--disable-pip-version-check"),
                *("-d", str(CACHE)),
            ],
            check=True,
            stdout=sys.stderr,
        )
        wheels = sorted(CACHE.glob(f"pulsar_lite-{version}-*.whl"))
    if not wheels:
        raise SystemExit(f"no pulsar-lite {version} wheel in {CACHE}")
    with zipfile.ZipFile(wheels[-1]) as wheel:
        member = next(n for n in wheel.namelist() if n.endswith("pulsar_lite/bin/pulsar-lite"))
        binary.parent.mkdir(parents=True, exist_ok=True)
        tmp = binary.with_suffix(".tmp")
        tmp.write_bytes(wheel.read(member))
        tmp.chmod(0o755)
        tmp.replace(binary)
    return binary


def start_pulsar_lite(args: argparse.Namespace) -> Broker:
    """A pulsar-lite broker on a free loopback port, once it accepts connections."""
    binary = ensure_pulsar_lite(args.pulsar_lite_version)
    workdir = Path(tempfile.mkdtemp(prefix="bench-pulsar-lite-"))
    port = free_port()
    # The default config also serves Prometheus metrics on 0.0.0.0:8080; turn that off.
    config = workdir / "pulsar-lite.toml"
    config.write_text("[metrics]\nenabled = false\n")
    command = [
        str(binary),
        "--config",
        str(config),
        "--addr",
        f"127.0.0.1:{port}",
        "--db-path",
        str(workdir / "data" / "pulsar-lite.db"),
        "--log-level",
        args.pulsar_lite_log_level,
    ]
    (workdir / "data").mkdir()
    broker = spawn(PULSAR_LITE, command, workdir, port)
    wait_ready(broker, lambda: accepts(port), timeout=30)
    return broker


def start_starquake(args: argparse.Namespace) -> Broker:
    """A Starquake broker on free loopback ports, once it is healthy."""
    return start_standalone(args.starquake_cmd, "bench-starquake-", args.starquake_args.split())


# --------------------------------------------------------------------------- running


def run_scenario(broker: Broker, scenario: Scenario, args: argparse.Namespace) -> Record:
    """One scenario, one client process; the JSON line it printed plus broker CPU."""
    command = [
        sys.executable,
        str(BENCH / scenario.script),
        f"--service-url={broker.service_url}",
        *scenario.argv(args),
    ]
    cpu_before = broker.cpu_seconds()
    started = time.monotonic()
    try:
        done = subprocess.run(
            command, capture_output=True, text=True, timeout=args.scenario_timeout, check=False
        )
    except subprocess.TimeoutExpired:
        return {"scenario": scenario.name, "ok": False, "error": "client timed out"}
    wall = time.monotonic() - started
    cpu = broker.cpu_seconds() - cpu_before
    record: Record | None = None
    for line in done.stdout.splitlines():
        if line.startswith("{"):
            candidate = json.loads(line)
            if candidate.get("scenario") == scenario.name:
                record = candidate
    if record is None:
        tail = (done.stderr or done.stdout)[-2000:]
        record = {"scenario": scenario.name, "ok": False, "error": f"no result: {tail}"}
    record["broker_cpu_s"] = round(cpu, 3)
    record["client_wall_s"] = round(wall, 2)
    messages = scenario.messages(record)
    if record.get("ok") and messages:
        record["broker_cpu_us_per_msg"] = round(cpu / messages * 1e6, 3)
    if not broker.alive():
        record["ok"] = False
        record["error"] = f"broker died: {broker.log_tail(5)}"
    return record


def run_all(brokers: dict[str, Broker], args: argparse.Namespace) -> dict[str, list[Record]]:
    """Every scenario x run x broker; broker order alternates from run to run."""
    chosen = [s for s in SCENARIOS if not args.scenario or s.name in args.scenario]
    names = [b for b in BROKERS if b in brokers]
    results: dict[str, list[Record]] = {f"{b}/{s.name}": [] for b in names for s in chosen}
    for run in range(args.runs):
        order = names if run % 2 == 0 else names[::-1]
        for scenario in chosen:
            for name in order:
                broker = brokers[name]
                if not broker.alive():
                    rec: Record = {"scenario": scenario.name, "ok": False, "error": "broker down"}
                else:
                    rec = run_scenario(broker, scenario, args)
                rec["run"] = run
                results[f"{name}/{scenario.name}"].append(rec)
                log(f"run {run + 1}/{args.runs} {name:<11} {scenario.name:<17} {_brief(rec)}")
    return results


def _brief(rec: Record) -> str:
    if not rec.get("ok"):
        return f"FAILED {rec.get('error', '')[:300]}"
    keys = ("msgs_per_s", "entries_per_s", "p50_ms", "p99_ms", "broker_cpu_us_per_msg")
    return " ".join(f"{k}={rec[k]}" for k in keys if k in rec)


# --------------------------------------------------------------------------- report


def summarize(results: dict[str, list[Record]], names: list[str]) -> list[Record]:
    """Per scenario metric: median (and spread) per broker, ratio, target verdict."""
    rows: list[Record] = []
    for scenario in SCENARIOS:
        for metric in scenario.metrics:
            row: Record = {"scenario": scenario.name, "metric": metric.key}
            present = False
            for name in names:
                runs = results.get(f"{name}/{scenario.name}")
                if runs is None:
                    continue
                present = True
                row[name] = run_stats(runs, metric.key)
            if not present:
                continue
            sq = row.get(STARQUAKE, {}).get("median")
            pl = row.get(PULSAR_LITE, {}).get("median")
            if sq is not None and pl:
                ratio = sq / pl
                row["ratio"] = round(ratio, 3)
                # "speedup" >= 1 always means Starquake is better, whichever way the metric goes.
                row["speedup"] = round(ratio if metric.higher_is_better else pl / sq, 3)
                if metric.target is not None:
                    row["met"] = metric.met(ratio)
            if metric.target is not None:
                row["target"] = metric.target_text()
                if "met" not in row and len(names) == len(BROKERS):
                    row["met"] = False  # a side produced no figure: the target is not shown met
            rows.append(row)
    return rows


def render_table(rows: list[Record], names: list[str]) -> str:
    """The summary rows as a text table."""
    header = ["scenario", "metric", *names, "sq/pl", "speedup", "target", "status"]
    lines = [header]
    for row in rows:
        status = ""
        if "met" in row:
            status = "met" if row["met"] else "MISSED"
        elif row.get("target"):
            status = "n/a"
        lines.append(
            [
                row["scenario"],
                row["metric"],
                *(format_cell(row.get(n)) for n in names),
                f"{row['ratio']:.2f}x" if "ratio" in row else "",
                f"{row['speedup']:.2f}x" if "speedup" in row else "",
                row.get("target", ""),
                status,
            ]
        )
    return align_columns(lines)


# --------------------------------------------------------------------------- main


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    """The command line."""
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument("--only", choices=BROKERS, help="run one broker only")
    p.add_argument("--runs", type=int, default=3, help="runs per scenario and broker")
    p.add_argument(
        "--scenario",
        action="append",
        choices=[s.name for s in SCENARIOS],
        help="limit to this scenario; repeatable",
    )
    p.add_argument("--scale", type=float, default=1.0, help="multiply every message count")
    p.add_argument("--batched-messages", type=int, default=200_000)
    p.add_argument("--unbatched-messages", type=int, default=50_000)
    p.add_argument("--backlog-messages", type=int, default=200_000)
    p.add_argument("--sync-sends", type=int, default=5_000)
    p.add_argument("--replay-frames", type=int, default=100_000)
    p.add_argument("--replay-batched-frames", type=int, default=10_000)
    p.add_argument("--replay-batch-size", type=int, default=100)
    p.add_argument(
        "--callbacks",
        choices=["each", "last"],
        default="each",
        help="perf_client produce callbacks: on every message, or only the last",
    )
    p.add_argument("--subscription-type", choices=["Shared", "Exclusive"], default="Shared")
    p.add_argument("--scenario-timeout", type=float, default=300, help="seconds per client run")
    p.add_argument("--starquake-cmd", default=default_starquake_cmd())
    p.add_argument(
        "--starquake-args",
        default="--bind-address 127.0.0.1 --advertised-address 127.0.0.1",
        help="extra arguments after the standalone command (keep traffic on loopback)",
    )
    p.add_argument("--pulsar-lite-version", default=PULSAR_LITE_VERSION)
    p.add_argument("--pulsar-lite-log-level", default="warn")
    p.add_argument("--keep", action="store_true", help="keep the brokers' temp dirs")
    add_json_option(p)
    return p.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    """Run the comparison and print its table; 1 if any run failed."""
    args = parse_args(argv)
    names = [args.only] if args.only else list(BROKERS)
    info = machine_info()
    brokers: dict[str, Broker] = {}
    began = time.monotonic()
    try:
        for name in names:
            brokers[name] = start_starquake(args) if name == STARQUAKE else start_pulsar_lite(args)
        results = run_all(brokers, args)
        peak_rss = {name: b.peak_rss_mb() for name, b in brokers.items()}
    finally:
        for broker in brokers.values():
            stop_broker(broker, args.keep)
    rows = summarize(results, names)
    table = render_table(rows, names)
    record: Record = {
        "machine": info,
        "elapsed_s": round(time.monotonic() - began, 1),
        "settings": {k: v for k, v in vars(args).items() if k != "json"},
        "brokers": {
            n: {"command": b.command, "peak_rss_mb": peak_rss.get(n)} for n, b in brokers.items()
        },
        "summary": rows,
        "runs": results,
    }
    RESULTS.mkdir(parents=True, exist_ok=True)
    stamp = dt.datetime.now().strftime("%Y%m%d-%H%M%S")
    saved = RESULTS / f"compare-{stamp}.json"
    saved.write_text(json.dumps(record, indent=1))
    rss = ", ".join(f"{n} {v} MB" for n, v in peak_rss.items())
    footer = (
        f"starquake build: {info['starquake_build']}; "
        f"runs={args.runs} scale={args.scale} elapsed={record['elapsed_s']}s "
        f"peak RSS: {rss}; medians, ±half the min-max spread; record: {saved}"
    )
    print_report(table, footer, record, args.json)
    failures = sum(r.get(n, {}).get("failed", 0) for r in rows for n in names)
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
