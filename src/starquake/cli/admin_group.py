"""The ``starquake admin`` group, its sub-groups and what their command modules share.

Output is a table on a terminal and the broker's JSON otherwise (``--output json|table``
overrides). Commands that change something print nothing when they succeed.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, TypeVar

import click

from starquake.cli.output import (
    OUTPUT_CHOICES,
    Tables,
    admin_errors,
    default_output,
    print_json_line,
    print_raw_json,
)
from starquake.cli.security_options import security_args, security_options
from starquake.cli.strict_options import StrictGroup

if TYPE_CHECKING:
    from starquake.admin.client import PulsarAdmin

F = TypeVar("F", bound=Callable[..., Any])

DEFAULT_ADMIN_URL = "http://localhost:8080"


class AdminContext:
    """The admin URL and output format given to ``starquake admin``."""

    def __init__(
        self, url: str, output: str | None, admin_args: dict[str, Any] | None = None
    ) -> None:
        self.url = url
        self.output = output
        self.admin_args: dict[str, Any] = dict(admin_args or {})
        """Keyword arguments of PulsarAdmin (TLS settings, ...)."""
        self._admin: PulsarAdmin | None = None

    @property
    def admin(self) -> PulsarAdmin:
        """The admin client, created on first use."""
        if self._admin is None:
            from starquake.admin.client import PulsarAdmin

            with admin_errors():
                self._admin = PulsarAdmin(self.url, **self.admin_args)
        return self._admin

    @property
    def json(self) -> bool:
        """Whether output is JSON (else tables)."""
        return (self.output or default_output()) == "json"

    def show(self, value: Any, *, raw: bool = True, header: str = "name") -> None:
        """Print a result: in JSON the broker's body (``raw``) or ``value`` encoded; else a
        table (lists of names under ``header``)."""
        if self.json:
            last = self.admin.last_response
            if raw and last is not None:
                print_raw_json(last.body)
            else:
                print_json_line(value)
            return
        if isinstance(value, list) and all(isinstance(v, str) for v in value):
            Tables().names(header, value)
        else:
            Tables().value(value)


def admin_command(group: click.Group, name: str, **settings: Any) -> Callable[[F], F]:
    """``group.command(name)`` taking ``--output`` too, running with the admin context as its
    first argument and the admin client's errors turned into exit codes."""

    def decorate(func: F) -> F:
        def run(*args: Any, output: str | None, **kwargs: Any) -> Any:
            obj = click.get_current_context().find_object(AdminContext)
            assert obj is not None
            if output is not None:
                obj.output = output
            with admin_errors():
                return func(obj, *args, **kwargs)

        functools.update_wrapper(run, func)
        option = click.option(
            "--output",
            type=click.Choice(OUTPUT_CHOICES),
            default=None,
            help="json (the broker's answer) or table; default: table on a terminal",
        )
        group.command(name, **settings)(option(run))
        return func

    return decorate


@click.group("admin", cls=StrictGroup)
@click.option(
    "--admin-url",
    envvar="STARQUAKE_ADMIN_URL",
    default=DEFAULT_ADMIN_URL,
    show_default=True,
    help="the broker's HTTP or HTTPS URL (also $STARQUAKE_ADMIN_URL)",
)
@click.option(
    "--output",
    type=click.Choice(OUTPUT_CHOICES),
    default=None,
    help="json (the broker's answer, for scripts) or table; default: table on a terminal",
)
@security_options
@click.pass_context
def admin(ctx: click.Context, admin_url: str, output: str | None) -> None:
    """Administer a broker over its admin REST API (as pulsar-admin)."""
    ctx.obj = AdminContext(admin_url, output, security_args(ctx))


@admin.group("clusters")
def clusters() -> None:
    """Clusters."""


@admin.group("tenants")
def tenants() -> None:
    """Tenants."""


@admin.group("namespaces")
def namespaces() -> None:
    """Namespaces (tenant/namespace) and their policies."""


@admin.group("topics")
def topics() -> None:
    """Topics and their subscriptions.

    TOPIC takes Pulsar's short forms: my-topic is persistent://public/default/my-topic,
    tenant/ns/my-topic is persistent://tenant/ns/my-topic.
    """


SUBSCRIPTION = click.option("-s", "--subscription", required=True, help="subscription name")
"""``-s/--subscription`` of the commands on one subscription."""
FORCE = click.option("-f", "--force", is_flag=True, help="even with producers or consumers")
"""``-f/--force`` of the commands that delete."""
