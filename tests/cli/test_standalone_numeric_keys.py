"""Every numeric key of ``starquake standalone`` is refused at start unless finite and in range."""

from __future__ import annotations

import dataclasses
import subprocess
import sys
from pathlib import Path

import pytest

from starquake.broker.config import BrokerConfig, ConfigError, load_config

NUMERIC = [
    f.name
    for f in dataclasses.fields(BrokerConfig)
    if isinstance(getattr(BrokerConfig, f.name, None), (int, float))
    and not isinstance(getattr(BrokerConfig, f.name, None), bool)
]


@pytest.mark.parametrize(
    ("key", "value"),
    [
        # nan disabled storing acknowledgments (every message redelivered after kill -9)
        ("managedLedgerCursorPositionFlushSeconds", "nan"),
        ("managedLedgerCursorPositionFlushSeconds", "inf"),
        # 0 made an idle broker spin
        ("managedLedgerCursorPositionFlushSeconds", "0"),
        ("managedLedgerTrimIntervalSeconds", "0"),
        ("backlogQuotaCheckIntervalInSeconds", "-inf"),
        ("managedLedgerMaxEntriesPerLedger", str(2**40)),
    ],
)
def test_a_bad_numeric_value_stops_the_broker_at_start_naming_the_key(
    tmp_path: Path, key: str, value: str
) -> None:
    result = subprocess.run(
        [sys.executable, "-m", "starquake.cli.main", "standalone", "-D", f"{key}={value}"],
        capture_output=True,
        cwd=tmp_path,
        timeout=30,
    )
    assert result.returncode == 2
    lines = result.stderr.decode().strip().splitlines()
    assert len(lines) == 1, lines
    assert lines[0].startswith(f"starquake: {key}: ") and "is out of range" in lines[0]
    assert not (tmp_path / "data").exists()


@pytest.mark.parametrize("key", NUMERIC)
@pytest.mark.parametrize("value", ["nan", "inf", "-inf", "1e400"])
def test_every_numeric_key_refuses_non_finite_values(key: str, value: str) -> None:
    kind = type(getattr(BrokerConfig, key))
    with pytest.raises(ConfigError, match=f"^{key}: "):
        load_config(overrides={key: value}, environ={})
    if kind is float:
        with pytest.raises(ConfigError, match=f"^{key}: .* out of range"):
            load_config(overrides={key: float(value)}, environ={})


@pytest.mark.parametrize("key", NUMERIC)
def test_every_numeric_default_is_in_range_and_huge_values_are_not(key: str) -> None:
    load_config(overrides={key: getattr(BrokerConfig, key)}, environ={})
    with pytest.raises(ConfigError, match=f"^{key}: .* out of range"):
        load_config(overrides={key: 2**64}, environ={})
