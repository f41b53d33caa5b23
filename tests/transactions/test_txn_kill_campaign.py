"""The transactions' kill -9 campaign, small and seeded: a few kill points of a broker process
at random moments of concurrent transactions' lives; every transaction ends whole."""

from __future__ import annotations

from pathlib import Path

from txn_campaign import Campaign


def test_kill9_campaign_ends_every_transaction_whole(tmp_path: Path) -> None:
    campaign = Campaign(tmp_path / "data", points=5, seed=7, workers=2, inputs=150)
    result = campaign.run()
    verdict = result.verdict
    assert not verdict.violations, "\n".join([result.summary(), *verdict.violations[:20]])
    assert sum(result.points.values()) >= 5
    assert verdict.outcome["committed"] > 0 and verdict.outcome["aborted"] > 0, result.summary()
