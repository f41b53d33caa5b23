"""The ``starquake`` command line.

``starquake standalone`` runs a broker. Other sub-commands (admin, client, perf) come later;
the broker package is imported only inside ``standalone`` so that they start fast.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="starquake",
        description="Starquake: a Pulsar-compatible messaging and streaming broker in Python.",
    )
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    sa = sub.add_parser("standalone", help="run a standalone broker with embedded storage")
    sa.add_argument("--data-dir", help="data directory (dataDir; default ./data)")
    sa.add_argument(
        "--broker-port", type=int, help="binary protocol port (brokerServicePort; 6650)"
    )
    sa.add_argument("--web-port", type=int, help="HTTP port (webServicePort; 8080)")
    sa.add_argument("--bind-address", help="address to listen on (bindAddress; 0.0.0.0)")
    sa.add_argument("--advertised-address", help="host name clients are told to use")
    sa.add_argument("-c", "--config", help="broker.conf-style file of key=value settings")
    sa.add_argument(
        "-D",
        dest="defines",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="set any broker.conf key (repeatable); also STARQUAKE_<key> in the environment",
    )
    sa.add_argument("--log-level", default="INFO", help="DEBUG, INFO, WARNING, ERROR")
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    if args.command == "standalone":
        from starquake.cli.standalone import run_standalone

        return run_standalone(args)
    return 2


if __name__ == "__main__":
    sys.exit(main())
