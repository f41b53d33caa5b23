"""The text forms of broker settings: ``broker.conf`` files and ``-D key=value`` overrides."""

from __future__ import annotations

from pathlib import Path

__all__ = ["ConfigError", "parse_conf_file", "parse_overrides"]


class ConfigError(ValueError):
    """A configuration key or value that cannot be used."""


def parse_conf_file(path: Path) -> dict[str, str]:
    """Read a ``broker.conf``: ``key=value`` lines; blank lines and ``#`` comments skipped."""
    values: dict[str, str] = {}
    for lineno, raw in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
        line = raw.strip()
        if not line or line.startswith("#"):
            continue
        if "=" not in line:
            raise ConfigError(f"{path}:{lineno}: expected key=value, got {raw!r}")
        key, value = line.split("=", 1)
        values[key.strip()] = value.strip()
    return values


def parse_overrides(items: list[str]) -> dict[str, str]:
    """Parse ``key=value`` strings from ``-D`` flags."""
    values: dict[str, str] = {}
    for item in items:
        if "=" not in item:
            raise ConfigError(f"-D expects key=value, got {item!r}")
        key, value = item.split("=", 1)
        values[key.strip()] = value.strip()
    return values
