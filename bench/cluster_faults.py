"""The cluster fault campaign: 3 JetStream nodes (3 copies of each entry) and 3 brokers under
load from the official client, ``--faults`` kill -9 of a random broker or node at random
moments (each started again); prints what was lost, reordered, duplicated or undelivered
(all must be 0) and how soon every topic took sends again after each fault.

    .venv/bin/python bench/cluster_faults.py --faults 30 --seed 1
"""

from __future__ import annotations

import argparse
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path[:0] = [str(ROOT / "tests"), str(ROOT / "tests" / "cluster")]

from fault_campaign import run_campaign  # noqa: E402


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--faults", type=int, default=30)
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--lease", type=float, default=20.0, help="starquakeOwnershipLeaseSeconds")
    parser.add_argument("--dir", type=Path, help="where the cluster's data goes (kept)")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="cluster-faults-") as scratch:
        base = args.dir or Path(scratch)
        report = run_campaign(base, args.faults, args.seed, lease=args.lease, log=print)
    print(report.summary())
    for kind in ("lost", "reordered", "duplicated", "undelivered"):
        for item in getattr(report, kind)[:20]:
            print(f"{kind}: {item}")
    return 0 if report.ok else 1


if __name__ == "__main__":
    sys.exit(main())
