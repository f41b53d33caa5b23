"""``starquake standalone``: run one broker until SIGINT or SIGTERM."""

from __future__ import annotations

import argparse
import asyncio
import difflib
import logging
import os
import signal
import sys
from pathlib import Path
from typing import Any

from starquake.broker.config import ConfigError, load_config, parse_overrides
from starquake.broker.data_dir import restrict_umask
from starquake.broker.server import (
    BrokerServer,
    BrokerStartError,
    storage_faults,
    tune_garbage_collector,
)

LOG_LEVELS = ("DEBUG", "INFO", "WARNING", "ERROR", "CRITICAL")


def log_level_refusal(value: str) -> str | None:
    """Why ``value`` is not a ``--log-level`` (None when it is one), with the close match."""
    if value.upper() in (*LOG_LEVELS, "WARN"):
        return None
    close = difflib.get_close_matches(value.upper(), LOG_LEVELS, n=1, cutoff=0.6)
    hint = f"; did you mean {close[0]}?" if close else ""
    return f"--log-level {value!r} is not one of {', '.join(LOG_LEVELS)}{hint}"


def run_standalone(args: argparse.Namespace) -> int:
    """Run a standalone broker with the parsed command line until stopped; the exit code."""
    refusal = log_level_refusal(str(args.log_level))
    if refusal is not None:
        print(f"starquake: {refusal}", file=sys.stderr)
        return 2
    logging.basicConfig(
        level=getattr(logging, str(args.log_level).upper()),
        format="%(asctime)s %(levelname)s %(name)s: %(message)s",
    )
    overrides: dict[str, Any] = {}
    try:
        overrides.update(parse_overrides(args.defines))
        for flag, key in (
            ("data_dir", "dataDir"),
            ("broker_port", "brokerServicePort"),
            ("web_port", "webServicePort"),
            ("bind_address", "bindAddress"),
            ("advertised_address", "advertisedAddress"),
        ):
            value = getattr(args, flag)
            if value is not None:
                overrides[key] = value
        config = load_config(Path(args.config) if args.config else None, overrides)
    except (ConfigError, OSError) as exc:
        print(f"starquake: {exc}", file=sys.stderr)
        return 2
    restrict_umask(config.data_dir_mode)
    try:
        import uvloop
    except ImportError:
        runner = asyncio.run
    else:
        runner = uvloop.run
    faults_file = os.environ.get("STARQUAKE_STORAGE_FAULTS")
    faults = storage_faults(faults_file) if faults_file else None
    try:
        runner(_serve(BrokerServer(config, faults)))
    except (OSError, BrokerStartError) as exc:
        print(f"starquake: cannot start the broker: {exc}", file=sys.stderr)
        return 1
    return 0


async def _serve(server: BrokerServer) -> None:
    loop = asyncio.get_running_loop()
    stopping = asyncio.Event()
    for sig in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(sig, stopping.set)
    await server.start()
    tune_garbage_collector()
    await stopping.wait()
    logging.getLogger("starquake").info("shutting down")
    await server.stop()
