"""The authentication options of the command groups that talk to a broker, as Pulsar's tools
take them: ``--auth-plugin`` (Pulsar's class name, e.g.
``org.apache.pulsar.client.impl.auth.AuthenticationToken``, or ``token``, ``basic``, ``tls``)
and ``--auth-params`` (``token:xxx``, ``file:///path``, ``{"userId": "u", "password": "p"}``,
``tlsCertFile:/c.pem,tlsKeyFile:/k.pem``)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, TypeVar

import click

F = TypeVar("F", bound=Callable[..., Any])

_AUTH_META = "starquake.auth"


def _remember(ctx: click.Context, param: click.Parameter, value: Any) -> Any:
    if param.name is not None and value is not None:
        ctx.meta.setdefault(_AUTH_META, {})[param.name] = value
    return value


def auth_options(command: F) -> F:
    """``--auth-plugin`` and ``--auth-params`` of a command group; read them back with
    :func:`auth_args`."""
    options = [
        click.option(
            "--auth-plugin",
            envvar="STARQUAKE_AUTH_PLUGIN",
            default=None,
            expose_value=False,
            callback=_remember,
            help="authentication: token, basic, tls or Pulsar's plugin class name "
            "(also $STARQUAKE_AUTH_PLUGIN)",
        ),
        click.option(
            "--auth-params",
            envvar="STARQUAKE_AUTH_PARAMS",
            default=None,
            expose_value=False,
            callback=_remember,
            help='its parameters: token:TOKEN, file:///path, {"userId":"u","password":"p"}, '
            "tlsCertFile:PATH,tlsKeyFile:PATH (also $STARQUAKE_AUTH_PARAMS)",
        ),
    ]
    for option in reversed(options):
        command = option(command)
    return command


def auth_args(ctx: click.Context) -> dict[str, Any]:
    """``{"authentication": ...}`` for ``Client`` and ``PulsarAdmin`` from the group's options
    (empty when none were given); a usage error if they do not make sense."""
    given: dict[str, str] = ctx.meta.get(_AUTH_META, {})
    plugin, params = given.get("auth_plugin"), given.get("auth_params")
    if plugin is None and params is None:
        return {}
    if plugin is None:
        raise click.UsageError("--auth-params needs --auth-plugin")
    if params is None:
        raise click.UsageError("--auth-plugin needs --auth-params")
    from starquake.client._auth import create_authentication

    try:
        return {"authentication": create_authentication(plugin, params)}
    except ValueError as exc:
        raise click.BadParameter(str(exc), param_hint="--auth-plugin/--auth-params") from None
