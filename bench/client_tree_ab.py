#!/usr/bin/env python3
"""Our client's consume-backlog CPU per message from two or more source trees, interleaved.

Answers "did this client change cost anything per message?" with one broker (the working
tree's, temp data dir, free loopback ports) and, per run and per tree, a fresh topic whose
backlog the official client writes (``client_compare.py``'s ``preproduce`` worker: numbered,
batched, ``--messages`` messages). Then ``client_compare.py``'s ``consume-backlog`` worker
drains it with ``starquake.client`` imported from that tree (``PYTHONPATH``), Exclusive,
``receiver_queue_size=1000``. The trees take turns and the order rotates every run, so drift on
a shared machine hits all of them. Prints the medians of client CPU per message (all threads)
and msgs/s, and each tree's ratio to the first.

A tree is ``NAME=SRC`` (a directory holding the ``starquake`` package) or ``NAME=@REV`` (a git
revision of this repository, exported with ``git archive``; default: ``working``, this
checkout's ``src``)::

    .venv/bin/python bench/client_tree_ab.py --tree before=@b4bd107^ --tree working=src
    .venv/bin/python bench/client_tree_ab.py --tree a=/tmp/a/src --tree b=src --runs 9
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import subprocess
import sys
import tarfile
import tempfile
import uuid
from io import BytesIO
from pathlib import Path
from typing import Any

from bench_brokers import REPO, accepts, default_starquake_cmd, free_port, log, spawn, wait_ready
from bench_common import add_json_option, align_columns, print_report
from client_compare import MODULES, OFFICIAL, OURS, Record, _worker

BENCH = Path(__file__).resolve().parent


def export_rev(rev: str, into: Path) -> Path:
    """``src`` of git revision ``rev``, exported under ``into``; the directory to import from."""
    archive = subprocess.run(
        ["git", "-C", str(REPO), "archive", "--format=tar", rev, "src"],
        capture_output=True,
        check=True,
    ).stdout
    with tarfile.open(fileobj=BytesIO(archive)) as tar:
        tar.extractall(into, filter="data")
    return into / "src"


def resolve_trees(specs: list[str], scratch: Path) -> dict[str, Path]:
    """NAME -> the directory holding that tree's ``starquake`` package."""
    trees: dict[str, Path] = {}
    for spec in specs:
        name, sep, where = spec.partition("=")
        if not sep or not name or name in trees:
            raise SystemExit(f"--tree wants NAME=SRC or NAME=@REV with distinct names: {spec!r}")
        if where.startswith("@"):
            path = export_rev(where[1:], scratch / name)
        else:
            path = (REPO / where).resolve() if not Path(where).is_absolute() else Path(where)
        if not (path / "starquake" / "client" / "__init__.py").exists():
            raise SystemExit(f"{spec}: no starquake/client package under {path}")
        trees[name] = path
    return trees


def run_in_tree(path: Path, argv: list[str]) -> subprocess.CompletedProcess[str]:
    """Run this Python on ``argv`` with ``path`` first on PYTHONPATH; output captured."""
    return subprocess.run(
        [sys.executable, *argv],
        capture_output=True,
        text=True,
        check=False,
        env={**os.environ, "PYTHONPATH": str(path)},
    )


def imported_from(path: Path) -> str:
    """Where ``import starquake.client`` resolves with ``path`` first on PYTHONPATH."""
    done = run_in_tree(path, ["-c", "import starquake.client as c; print(c.__file__)"])
    if done.returncode:
        raise SystemExit(f"starquake.client does not import from {path}:\n{done.stderr[-1500:]}")
    return done.stdout.strip()


def consume_once(args: argparse.Namespace, service_url: str, tree: Path) -> Record:
    """Write a fresh backlog with the official client, drain it with ``tree``'s client."""
    topic = f"persistent://public/default/ab-{uuid.uuid4().hex[:12]}"
    common = [f"--messages={args.messages}", f"--topic={topic}"]
    pre = _worker(
        args, service_url, MODULES[OFFICIAL], "preproduce", *common, "--max-pending=10000"
    )
    if not pre.get("ok"):
        return {**pre, "error": f"preproduce: {pre.get('error')}"}
    saved = os.environ.get("PYTHONPATH")
    os.environ["PYTHONPATH"] = str(tree)
    try:
        return _worker(
            args,
            service_url,
            MODULES[OURS],
            "consume-backlog",
            *common,
            f"--receiver-queue-size={args.receiver_queue_size}",
        )
    finally:
        if saved is None:
            del os.environ["PYTHONPATH"]
        else:
            os.environ["PYTHONPATH"] = saved


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tree", action="append", metavar="NAME=SRC|NAME=@REV")
    parser.add_argument("--runs", type=int, default=7, help="runs of each tree")
    parser.add_argument("--messages", type=int, default=200_000)
    parser.add_argument("--receiver-queue-size", type=int, default=1000)
    parser.add_argument("--size", type=int, default=100)
    parser.add_argument("--scenario-timeout", type=float, default=300)
    add_json_option(parser)
    args = parser.parse_args()
    scratch = Path(tempfile.mkdtemp(prefix="bench-client-ab-"))
    broker = None
    try:
        trees = resolve_trees(args.tree or ["working=src"], scratch / "trees")
        for name, path in trees.items():
            log(f"{name}: starquake.client from {imported_from(path)}")
        port, web_port = free_port(), free_port()
        command = [default_starquake_cmd(), "standalone", "--data-dir", str(scratch / "data")]
        command += ["--broker-port", str(port), "--web-port", str(web_port)]
        command += ["--bind-address", "127.0.0.1", "--advertised-address", "127.0.0.1"]
        command += ["--log-level", "WARNING"]
        broker = spawn("starquake", command, scratch, port)
        wait_ready(broker, lambda: accepts(port), timeout=60)
        service_url = f"pulsar://127.0.0.1:{port}"
        names = list(trees)
        results: dict[str, list[Record]] = {name: [] for name in names}
        for run in range(args.runs):
            shift = run % len(names)
            for name in names[shift:] + names[:shift]:
                rec = consume_once(args, service_url, trees[name])
                results[name].append(rec)
                brief = (
                    f"{rec['client_cpu_us_per_msg']} us CPU/msg, {rec['msgs_per_s']:,.0f} msgs/s"
                    if rec.get("ok")
                    else f"FAILED {str(rec.get('error'))[:300]}"
                )
                log(f"run {run + 1} {name}: {brief}")
    finally:
        if broker is not None:
            broker.stop()
        shutil.rmtree(scratch, ignore_errors=True)
    lines: list[list[Any]] = [["tree", "client us/msg", "ratio", "msgs/s", "ratio", "failed"]]
    record: dict[str, Any] = {"messages": args.messages, "runs": args.runs, "trees": {}}
    base_cpu = base_rate = None
    for name in names:
        ok = [r for r in results[name] if r.get("ok")]
        cpu = statistics.median(r["client_cpu_us_per_msg"] for r in ok) if ok else None
        rate = statistics.median(r["msgs_per_s"] for r in ok) if ok else None
        if base_cpu is None:
            base_cpu, base_rate = cpu, rate
        lines.append(
            [
                name,
                f"{cpu:.2f}" if cpu else "-",
                f"{cpu / base_cpu:.3f}x" if cpu and base_cpu else "-",
                f"{rate:,.0f}" if rate else "-",
                f"{rate / base_rate:.3f}x" if rate and base_rate else "-",
                len(results[name]) - len(ok),
            ]
        )
        record["trees"][name] = {
            "path": str(trees[name]),
            "client_cpu_us_per_msg": [r["client_cpu_us_per_msg"] for r in ok],
            "msgs_per_s": [r["msgs_per_s"] for r in ok],
            "median_client_cpu_us_per_msg": cpu,
            "median_msgs_per_s": rate,
        }
    footer = (
        f"consume-backlog of {args.messages:,} batched messages, medians of {args.runs} "
        f"interleaved runs per tree; ratios against {names[0]}"
    )
    print_report(align_columns(lines), footer, record, args.json)
    return 1 if any(not r.get("ok") for rs in results.values() for r in rs) else 0


if __name__ == "__main__":
    raise SystemExit(main())
