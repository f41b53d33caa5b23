"""Long crash campaign: seeded random walks against a real broker process until time is up.

Each walk is the model-based crash test of ``tests/crash/crash_model.py`` with a new seed (the
broker settings follow from the seed). A walk that breaks an invariant is shrunk to a minimal
step list, printed as Python source for a regression test, and the campaign goes on.

    .venv/bin/python bench/crash_campaign.py --minutes 30 --seed 1000
    .venv/bin/python bench/crash_campaign.py --replay 1234          # one walk, verbose
    .venv/bin/python bench/crash_campaign.py --avoid-known          # steer around known bugs
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path[:0] = [str(ROOT / "tests"), str(ROOT / "tests" / "crash")]

from crash_model import (  # noqa: E402
    KNOWN_BUGS,
    Stats,
    WalkConfig,
    describe,
    generate,
    run_walk,
    shrink,
)


def main() -> int:
    """Run seeded crash walks until the time is up; 1 if any violated an invariant."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--minutes", type=float, default=30, help="wall time to run (30)")
    parser.add_argument("--seed", type=int, default=None, help="first seed (default: from time)")
    parser.add_argument("--restarts", type=int, default=12, help="restarts per walk (12)")
    parser.add_argument("--shrink-minutes", type=float, default=4, help="per violation (4)")
    parser.add_argument("--avoid-known", action="store_true", help="steer around KNOWN_BUGS")
    parser.add_argument("--replay", type=int, default=None, help="run one seed and stop")
    args = parser.parse_args()
    avoid = KNOWN_BUGS if args.avoid_known else frozenset()
    seed = args.seed if args.seed is not None else int(time.time()) % 1_000_000
    if args.replay is not None:
        seed = args.replay
    deadline = time.monotonic() + args.minutes * 60
    started = time.monotonic()
    total = Stats()
    walks = 0
    violations: Counter[str] = Counter()
    print(f"crash campaign from seed {seed}, {args.minutes:g} min, avoid={sorted(avoid)}")
    with tempfile.TemporaryDirectory(prefix="crash-campaign-") as tmp:
        workdir = Path(tmp) / "walk"
        while time.monotonic() < deadline:
            config = WalkConfig.for_seed(seed, avoid)
            steps = generate(seed, config, args.restarts)
            violation, stats = run_walk(config, steps, workdir)
            walks += 1
            total.add(stats)
            print(
                f"seed {seed}: {stats.steps} steps, {stats.restarts} restarts "
                f"({stats.kills} kill -9, {stats.clean_stops} clean), {stats.checks} checks, "
                f"{stats.deliveries} deliveries"
                + (f" -> VIOLATION {violation}" if violation else ""),
                flush=True,
            )
            if violation is not None:
                violations[violation.invariant] += 1
                print(f"  config: {config!r}", flush=True)
                minimal = shrink(
                    config,
                    steps,
                    workdir,
                    time.monotonic() + args.shrink_minutes * 60,
                    same=lambda v, kind=violation.invariant: v.invariant == kind,
                )
                again, _ = run_walk(config, minimal, workdir)
                print(f"  minimal sequence ({len(minimal)} steps, replay: {again}):")
                print("    " + describe(config, minimal).replace("\n", "\n    "), flush=True)
            if args.replay is not None:
                break
            seed += 1
    minutes = (time.monotonic() - started) / 60
    print()
    print(f"minutes:            {minutes:.1f}")
    print(f"walks (seeds):      {walks}")
    print(f"steps:              {total.steps}")
    print(f"restarts:           {total.restarts}")
    print(f"  kill -9:          {total.kills}")
    print(f"  clean stops:      {total.clean_stops}")
    print(f"invariant checks:   {total.checks}")
    print(f"messages sent:      {total.messages}")
    print(f"deliveries checked: {total.deliveries}")
    print(f"violations:         {sum(violations.values())} {dict(violations)}")
    if total.anomalies:
        print(f"anomalies (not violations): {len(total.anomalies)}, e.g. {total.anomalies[:3]}")
    return 1 if violations else 0


if __name__ == "__main__":
    sys.exit(main())
