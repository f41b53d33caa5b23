"""Broker settings from the environment: ``STARQUAKE_<key>`` variables."""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping

from starquake.broker import pulsar_settings
from starquake.broker.config_text import ConfigError

log = logging.getLogger("starquake.broker.config")

ENV_PREFIX = "STARQUAKE_"
OTHER_VARIABLES = frozenset(
    {
        "STARQUAKE_STORAGE_FAULTS",
        "STARQUAKE_URL",
        "STARQUAKE_ADMIN_URL",
        "STARQUAKE_AUTH_PLUGIN",
        "STARQUAKE_AUTH_PARAMS",
        "STARQUAKE_TLS_TRUST_CERT_PATH",
        "STARQUAKE_MODEL_EXAMPLES",
        "STARQUAKE_METADATA_EXAMPLES",
        "STARQUAKE_DAMAGE_EXAMPLES",
        "STARQUAKE_CAMPAIGN_SCALE",
        "STARQUAKE_TEST_WORKERS",
        "STARQUAKE_TEST_PURE",
        "STARQUAKE_PURE",
    }
)
"""``STARQUAKE_*`` environment variables that are not configuration keys (the command line
tools' and the tests' own)."""


def environment_settings(
    env: Mapping[str, str], known: set[str], close_key: Callable[[str], str | None]
) -> dict[str, str]:
    """The configuration keys (``known``, or Pulsar's) set as ``STARQUAKE_<key>`` variables. A
    variable that looks like a misspelt key (``close_key``) is refused (ConfigError naming it);
    other unknown ones are logged."""
    values: dict[str, str] = {}
    for name, value in env.items():
        if not name.startswith(ENV_PREFIX) or name in OTHER_VARIABLES:
            continue
        key = name[len(ENV_PREFIX) :]
        if key in known or pulsar_settings.pulsar_key(key):
            values[key] = value
            continue
        close = close_key(key)
        if close is not None:
            raise ConfigError(
                f"environment variable {name} is not a configuration key; "
                f"did you mean {ENV_PREFIX}{close}?"
            )
        log.warning("ignoring environment variable %s: not a configuration key", name)
    return values
