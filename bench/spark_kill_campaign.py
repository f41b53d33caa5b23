"""Exactly-once campaign: the Spark pipeline of tests/spark/eo_pipeline.py, killed at random
points (kill -9 of the broker, of the pipeline, or both in turn), restarted, and checked: no
source message lost, none stored twice in the partitioned sink (keyed and unkeyed rows).

    .venv/bin/python bench/spark_kill_campaign.py --points 10 --seed 7
    .venv/bin/python bench/spark_kill_campaign.py --points 10 --kill driver
    .venv/bin/python bench/spark_kill_campaign.py --points 10 --kill both --transaction

Each point takes one to three minutes (two Spark JVM starts).
"""

from __future__ import annotations

import argparse
import os
import random
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path[:0] = [str(ROOT / "tests" / "spark"), str(ROOT / "tests")]  # its conftest first
os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")

from broker_process import BrokerProcess  # noqa: E402
from conftest import SparkBroker  # noqa: E402
from eo_crash import TOTAL, run_kill_point  # noqa: E402


def main() -> int:
    """Run the kill points; 1 if any lost or duplicated a message."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--points", type=int, default=10, help="kill points (10)")
    parser.add_argument("--seed", type=int, default=1, help="random seed (1)")
    parser.add_argument("--kill", choices=["broker", "driver", "both"], default="broker")
    parser.add_argument(
        "--transaction",
        action="store_true",
        help="the sink writes with exactlyOnceMode=transaction (broker: transactions on, "
        "deduplication off)",
    )
    args = parser.parse_args()
    rng = random.Random(args.seed)
    failures = 0
    with tempfile.TemporaryDirectory() as tmp:
        settings = ["brokerDeleteInactiveTopicsEnabled=false"]
        if args.transaction:
            settings += ["transactionCoordinatorEnabled=true", "brokerDeduplicationEnabled=false"]
        proc = BrokerProcess(Path(tmp) / "data", *settings)
        proc.start()
        try:
            broker = SparkBroker(proc)
            for point in range(args.points):
                at = rng.randrange(1, TOTAL - 500)
                delay = rng.uniform(0, 2)
                keyed = point % 2 == 0
                kill_broker = args.kill == "broker" or (args.kill == "both" and point % 2 == 1)
                outcome = run_kill_point(
                    broker,
                    Path(tmp),
                    f"campaign-{args.seed}-{point}",
                    kill_broker=kill_broker,
                    keyed=keyed,
                    at=at,
                    delay=delay,
                    transaction=args.transaction,
                )
                bad = outcome.lost or outcome.duplicated
                failures += bool(bad)
                print(
                    f"point {point}: kill {'broker' if kill_broker else 'driver'} {delay:.1f} s "
                    f"after {outcome.killed_at} sink rows ({'keyed' if keyed else 'unkeyed'}): "
                    f"lost {outcome.lost}, duplicated {outcome.duplicated}"
                    + (f"  [{outcome.detail}]" if bad else ""),
                    flush=True,
                )
        finally:
            proc.cleanup()
    print(f"{args.points - failures} of {args.points} points exactly once")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
