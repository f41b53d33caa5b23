"""A broker process under a stream of fuzzed connections keeps a bounded RSS and keeps serving.

Runs ``bench/fuzz_wire.py`` (its own broker process) with fewer frames than its default. The
fuzzer's traffic creates a bounded set of topics and subscriptions, so after the warm-up (the
first tenth of the frames) the broker's RSS must stay nearly flat: per-connection state that
outlived its connection would grow it with every one of the thousands of connections.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

BENCH = Path(__file__).resolve().parents[2] / "bench" / "fuzz_wire.py"


@pytest.mark.timeout(330)
def test_fuzzed_connections_leave_rss_flat() -> None:
    run = subprocess.run(
        [
            sys.executable,
            str(BENCH),
            "--frames",
            "150000",
            "--json",
            "--seed",
            "7",
            "-D",
            "managedLedgerCacheSizeMB=4",
        ],
        capture_output=True,
        text=True,
        timeout=300,  # about 12 s on an idle machine; minutes on a heavily loaded one
    )
    assert run.returncode == 0, run.stdout + run.stderr
    result = json.loads(run.stdout.strip().splitlines()[-1])
    assert result["broker_crashes"] == 0
    assert result["hangs"] == 0
    assert result["tracebacks_in_broker_log"] == 0
    assert result["healthy_client_round_trip"] is True
    assert result["connections"] > 1000
    assert result["connections_closed_by_broker"] > 0
    assert result["error_replies"] > 0
    growth_kb = result["rss_kb_end"] - result["rss_kb_after_warmup"]
    assert growth_kb < 12 * 1024, result
