"""The ``starquake`` command line.

- ``starquake standalone``: run a broker (its flags are parsed by argparse, below);
- ``starquake admin``: the admin REST API, as ``pulsar-admin``;
- ``starquake client``: produce and consume, as ``pulsar-client``;
- ``starquake perf``: load tests, as ``pulsar-perf``;
- ``starquake tokens``: keys and tokens for token authentication, as ``pulsar tokens``.

The broker package is imported only inside ``standalone``, and the client only by the commands
that use it, so that ``starquake admin ...`` starts fast.

Exit codes: 0 success, 1 the broker refused the request (or failed to start), 2 a usage
error, 3 the broker cannot be reached.
"""

from __future__ import annotations

import argparse
import importlib
import sys
from collections.abc import Sequence

import click

_STANDALONE_EPILOG = """\
configuration:
  Every setting is a key of Pulsar's broker.conf. Lowest precedence first: the defaults, the
  -c FILE (key=value lines; keys Starquake does not use are ignored), STARQUAKE_<key>
  environment variables, then -D KEY=VALUE and the flags above. An unknown key given with -D,
  or a STARQUAKE_ variable that looks like a misspelt key, stops the broker (exit code 2).
  Keys (their defaults and meanings: README.md, "Configuration"):
{keys}

examples:
  starquake standalone --data-dir /var/lib/starquake --log-level WARNING
  starquake standalone -D brokerDeduplicationEnabled=true -D defaultRetentionTimeInMinutes=60
  STARQUAKE_webServicePort=8081 starquake standalone
"""


def _keys_text() -> str:
    import textwrap

    from starquake.broker.config import BrokerConfig

    text = ", ".join(BrokerConfig.keys())
    return textwrap.fill(text, width=92, initial_indent="    ", subsequent_indent="    ")


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="starquake",
        description="Starquake: a Pulsar-compatible messaging and streaming broker in Python.",
    )
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    sa = sub.add_parser(
        "standalone",
        help="run a standalone broker with embedded storage",
        description="Run a standalone broker with embedded storage until SIGINT or SIGTERM.",
        epilog=_STANDALONE_EPILOG.format(keys=_keys_text()),
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
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
        help="set a broker.conf key (repeatable; the keys are listed below); also "
        "STARQUAKE_<key> in the environment",
    )
    sa.add_argument(
        "--log-level",
        default="INFO",
        metavar="LEVEL",
        help="DEBUG, INFO (one line per lifecycle event: the default), WARNING, ERROR or "
        "CRITICAL, in any case",
    )
    return parser


def _standalone(args: Sequence[str]) -> int:
    """``starquake standalone ARGS``: argparse parses the flags (exit code 2 on bad ones)."""
    parsed = _parser().parse_args(["standalone", *args])
    from starquake.cli.standalone import run_standalone

    return run_standalone(parsed)


class _LazyGroup(click.Group):
    """A group whose sub-commands (module, attribute) are imported when first used, so that
    one command does not pay for the imports of the others."""

    LAZY = {
        "admin": ("starquake.cli.admin_commands", "admin"),
        "client": ("starquake.cli.client_tool", "client"),
        "cluster": ("starquake.cli.cluster", "cluster"),
        "perf": ("starquake.cli.perf", "perf"),
        "tokens": ("starquake.cli.tokens", "tokens"),
    }

    def list_commands(self, ctx: click.Context) -> list[str]:
        return sorted([*super().list_commands(ctx), *self.LAZY])

    def get_command(self, ctx: click.Context, cmd_name: str) -> click.Command | None:
        if cmd_name in self.LAZY:
            module, attribute = self.LAZY[cmd_name]
            command = getattr(importlib.import_module(module), attribute)
            assert isinstance(command, click.Command)
            return command
        return super().get_command(ctx, cmd_name)


@click.group(
    "starquake",
    cls=_LazyGroup,
    context_settings={"help_option_names": ["-h", "--help"], "max_content_width": 100},
)
def cli() -> None:
    """Starquake: a Pulsar-compatible messaging and streaming broker in Python."""


@cli.command(
    "standalone",
    context_settings={"ignore_unknown_options": True, "allow_extra_args": True},
    add_help_option=False,
)
@click.argument("args", nargs=-1, type=click.UNPROCESSED)
def standalone(args: tuple[str, ...]) -> None:
    """Run a standalone broker with embedded storage.

    Its options: starquake standalone --help.
    """
    sys.exit(_standalone(args))


def main(argv: Sequence[str] | None = None) -> int:
    """Run ``starquake ARGV`` (default: the process's arguments); the exit code."""
    args = list(sys.argv[1:] if argv is None else argv)
    if args[:1] == ["standalone"]:
        return _standalone(args[1:])
    try:
        cli.main(args=args, prog_name="starquake")
    except SystemExit as exc:
        code = exc.code
        if code is None:
            return 0
        if isinstance(code, int):
            return code
        print(code, file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
