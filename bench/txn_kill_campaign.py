"""Transactions' kill -9 campaign: a broker process killed at random moments of concurrent
transactions' lives (and while it recovers); every transaction must end whole.

    .venv/bin/python bench/txn_kill_campaign.py --points 30 --seed 1
    .venv/bin/python bench/txn_kill_campaign.py --points 30 --seed 1 --runs 3   # seeds 1, 2, 3

Prints, per run, the kill points by kind and the transactions committed-answered / aborted /
unknown-outcome (and what each ended as), and the violations; exits 1 if there was any.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path[:0] = [str(ROOT / "tests"), str(ROOT / "tests" / "transactions")]

from txn_campaign import Campaign  # noqa: E402


def main() -> int:
    """Run the campaign(s); 1 if any violated an invariant."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--points", type=int, default=30, help="kill points per run (30)")
    parser.add_argument("--seed", type=int, default=1, help="seed of the first run (1)")
    parser.add_argument("--runs", type=int, default=1, help="runs, seeds in sequence (1)")
    parser.add_argument("--workers", type=int, default=3, help="transaction threads (3)")
    parser.add_argument("--verbose", action="store_true", help="print every kill point")
    args = parser.parse_args()
    failed = 0
    for seed in range(args.seed, args.seed + args.runs):
        started = time.monotonic()
        with tempfile.TemporaryDirectory(prefix="txn-campaign-") as tmp:
            campaign = Campaign(
                Path(tmp) / "data",
                args.points,
                seed,
                workers=args.workers,
                say=print if args.verbose else lambda _: None,
            )
            result = campaign.run()
        elapsed = time.monotonic() - started
        print(f"seed {seed} ({elapsed:.0f} s): {result.summary()}", flush=True)
        errors = ", ".join(f"{k} {n}" for k, n in result.errors.most_common())
        print(f"  client errors met: {errors or 'none'}", flush=True)
        for violation in result.verdict.violations[:30]:
            print(f"  VIOLATION {violation}", flush=True)
        failed += bool(result.verdict.violations)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
