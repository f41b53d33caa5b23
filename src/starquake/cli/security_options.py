"""The TLS and authentication options of the command groups that talk to a broker, as Pulsar's
command-line tools take them:

- ``--tls-trust-cert-path``, ``--tls-allow-insecure``, ``--tls-enable-hostname-verification``
  for ``pulsar+ssl://`` and ``https://`` URLs;
- ``--auth-plugin`` (Pulsar's class name, e.g.
  ``org.apache.pulsar.client.impl.auth.AuthenticationToken``, or ``token``, ``basic``, ``tls``)
  and ``--auth-params`` (``token:xxx``, ``file:///path``, ``{"userId": "u", "password": "p"}``,
  ``tlsCertFile:/c.pem,tlsKeyFile:/k.pem``).

A group takes them with :func:`security_options`; :func:`security_args` gives them back as
keyword arguments of ``Client`` and ``PulsarAdmin``.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, TypeVar

import click

F = TypeVar("F", bound=Callable[..., Any])

_META = "starquake.security"


def _remember(ctx: click.Context, param: click.Parameter, value: Any) -> Any:
    """Keep an option's value for :func:`security_args`. The options may be given to a group
    and to its command (``perf produce`` takes them as pulsar-perf does): a default at one
    level does not replace a value given at the other."""
    if param.name is None or value is None:
        return value
    remembered = ctx.meta.setdefault(_META, {})
    source = ctx.get_parameter_source(param.name)
    if source is click.core.ParameterSource.DEFAULT and param.name in remembered:
        return value
    remembered[param.name] = value
    return value


_OPTIONS = [
    click.option(
        "--tls-trust-cert-path",
        "--trust-cert-file",
        envvar="STARQUAKE_TLS_TRUST_CERT_PATH",
        default=None,
        expose_value=False,
        callback=_remember,
        help="CA certificates (PEM) the broker's certificate must chain to "
        "(default: the system's; also $STARQUAKE_TLS_TRUST_CERT_PATH)",
    ),
    click.option(
        "--tls-allow-insecure",
        is_flag=True,
        expose_value=False,
        callback=_remember,
        help="accept any broker certificate (no verification)",
    ),
    click.option(
        "--tls-enable-hostname-verification",
        is_flag=True,
        expose_value=False,
        callback=_remember,
        help="also check that the broker's certificate names its host",
    ),
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
_TLS_ARGS = {
    # option name -> keyword argument of Client and PulsarAdmin
    "tls_trust_cert_path": "tls_trust_certs_file_path",
    "tls_allow_insecure": "tls_allow_insecure_connection",
    "tls_enable_hostname_verification": "tls_validate_hostname",
}


def security_options(command: F) -> F:
    """Add the TLS and authentication options to a command group."""
    for option in reversed(_OPTIONS):
        command = option(command)
    return command


def security_args(ctx: click.Context) -> dict[str, Any]:
    """The options given to the command's group as keyword arguments of ``Client`` and
    ``PulsarAdmin`` (TLS settings, and ``authentication``); a usage error if the
    authentication options do not make sense."""
    given: dict[str, Any] = ctx.meta.get(_META, {})
    args = {arg: given[name] for name, arg in _TLS_ARGS.items() if name in given}
    plugin, params = given.get("auth_plugin"), given.get("auth_params")
    if plugin is None and params is None:
        return args
    if plugin is None:
        raise click.UsageError("--auth-params needs --auth-plugin")
    if params is None:
        raise click.UsageError("--auth-plugin needs --auth-params")
    from starquake.client.base._auth import create_authentication

    try:
        args["authentication"] = create_authentication(plugin, params)
    except ValueError as exc:
        raise click.BadParameter(str(exc), param_hint="--auth-plugin/--auth-params") from None
    return args
