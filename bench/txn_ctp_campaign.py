"""Consume-transform-produce under kill -9: a transactional job (its own process) copies an
input topic to an output topic while the job and the broker are SIGKILLed at random moments;
exactly one output per input must remain.

    .venv/bin/python bench/txn_ctp_campaign.py --inputs 300 --job-kills 10 --broker-kills 10

Prints the kills and the outputs stored, lost, duplicated; exits 1 on any violation.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path[:0] = [str(ROOT / "tests"), str(ROOT / "tests" / "transactions")]

from ctp_campaign import run_ctp_campaign  # noqa: E402


def main() -> int:
    """Run the CTP campaign(s); 1 if any violated exactly-once."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--inputs", type=int, default=300, help="input messages (300)")
    parser.add_argument("--job-kills", type=int, default=10, help="kills of the job (10)")
    parser.add_argument("--broker-kills", type=int, default=10, help="kills of the broker (10)")
    parser.add_argument("--seed", type=int, default=1, help="seed of the first run (1)")
    parser.add_argument("--runs", type=int, default=1, help="runs, seeds in sequence (1)")
    parser.add_argument(
        "--mode",
        choices=["individual", "cumulative", "both"],
        default="both",
        help="how the job acknowledges its inputs (both: a run of each per seed)",
    )
    parser.add_argument("--verbose", action="store_true", help="print every kill")
    args = parser.parse_args()
    modes = ["individual", "cumulative"] if args.mode == "both" else [args.mode]
    failed = 0
    for seed in range(args.seed, args.seed + args.runs):
        for mode in modes:
            started = time.monotonic()
            with tempfile.TemporaryDirectory(prefix="txn-ctp-") as tmp:
                result = run_ctp_campaign(
                    Path(tmp) / "data",
                    args.inputs,
                    args.job_kills,
                    args.broker_kills,
                    seed,
                    mode,
                    say=print if args.verbose else lambda _: None,
                )
            elapsed = time.monotonic() - started
            print(f"seed {seed} {mode} ({elapsed:.0f} s): {result.summary()}", flush=True)
            for violation in result.violations:
                print(f"  VIOLATION {violation}", flush=True)
            failed += bool(result.violations)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
