"""A consume-transform-produce job in its own process, with SIGKILLs of the job and of the
broker: exactly one output per input in the end (none lost, none duplicated)."""

from __future__ import annotations

from pathlib import Path

import pytest
from ctp_campaign import run_ctp_campaign


@pytest.mark.parametrize("mode", ["individual", "cumulative"])
def test_ctp_job_under_kills_gives_exactly_one_output_per_input(tmp_path: Path, mode: str) -> None:
    result = run_ctp_campaign(
        tmp_path / "data", inputs=60, job_kills=2, broker_kills=2, seed=11, mode=mode
    )
    assert not result.violations, "\n".join([result.summary(), *result.violations])
    assert sum(result.kills.values()) == 4
