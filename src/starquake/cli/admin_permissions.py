"""Permissions from the command line, as pulsar-admin names them.

- ``starquake admin namespaces grant-permission NAMESPACE --role R --actions produce,consume``,
  ``revoke-permission NAMESPACE --role R``, ``permissions NAMESPACE``;
- ``starquake admin namespaces grant-subscription-permission NAMESPACE --subscription S
  --roles r1,r2`` and ``revoke-subscription-permission NAMESPACE --subscription S --role R``;
- ``starquake admin namespaces set-subscription-auth-mode NAMESPACE --subscription-auth-mode
  Prefix`` (or ``None``) and ``get-subscription-auth-mode NAMESPACE``: with ``Prefix``, roles
  other than super users and tenant admins may only use subscriptions named after the role;
- ``starquake admin topics grant-permission TOPIC --role R --actions ...``,
  ``revoke-permission TOPIC --role R``, ``permissions TOPIC`` (the namespace's grants
  included).

The actions are ``produce``, ``consume``, ``functions``, ``sources``, ``sinks`` and
``packages``.
"""

from __future__ import annotations

import click

from starquake.cli.admin_group import AdminContext, admin_command, namespaces, topics
from starquake.cli.params import check_topic, split_values

ACTIONS = ("produce", "consume", "functions", "sources", "sinks", "packages")

_ROLE = click.option("--role", required=True, help="the role (as clients authenticate)")
_ACTIONS = click.option(
    "--actions",
    required=True,
    multiple=True,
    help=f"actions to grant, comma-separated (repeatable): {', '.join(ACTIONS)}",
)


def _actions(values: tuple[str, ...]) -> list[str]:
    actions = split_values(values) or []
    unknown = [action for action in actions if action not in ACTIONS]
    if unknown or not actions:
        raise click.BadParameter(
            f"{', '.join(unknown) or 'none given'}: the actions are {', '.join(ACTIONS)}",
            param_hint="--actions",
        )
    return actions


# --- namespaces --------------------------------------------------------------------------------


@admin_command(namespaces, "permissions")
@click.argument("namespace")
def namespaces_permissions(ctx: AdminContext, namespace: str) -> None:
    """Show the roles granted actions on a namespace."""
    ctx.show(ctx.admin.namespaces.permissions(namespace))


@admin_command(namespaces, "grant-permission")
@click.argument("namespace")
@_ROLE
@_ACTIONS
def namespaces_grant_permission(
    ctx: AdminContext, namespace: str, role: str, actions: tuple[str, ...]
) -> None:
    """Let a role do actions on every topic of a namespace."""
    ctx.admin.namespaces.grant_permission(namespace, role, _actions(actions))


@admin_command(namespaces, "revoke-permission")
@click.argument("namespace")
@_ROLE
def namespaces_revoke_permission(ctx: AdminContext, namespace: str, role: str) -> None:
    """Take back what a role was granted on a namespace."""
    ctx.admin.namespaces.revoke_permission(namespace, role)


@admin_command(namespaces, "grant-subscription-permission")
@click.argument("namespace")
@click.option("--subscription", required=True, help="the subscription name")
@click.option("--roles", required=True, multiple=True, help="roles, comma-separated (repeatable)")
def namespaces_grant_subscription_permission(
    ctx: AdminContext, namespace: str, subscription: str, roles: tuple[str, ...]
) -> None:
    """Let only these roles consume with a subscription on the namespace's topics."""
    names = split_values(roles)
    if not names:
        raise click.BadParameter("no role given", param_hint="--roles")
    ctx.admin.namespaces.grant_subscription_permission(namespace, subscription, names)


@admin_command(namespaces, "revoke-subscription-permission")
@click.argument("namespace")
@click.option("--subscription", required=True, help="the subscription name")
@_ROLE
def namespaces_revoke_subscription_permission(
    ctx: AdminContext, namespace: str, subscription: str, role: str
) -> None:
    """Remove a role from those allowed to consume with a subscription."""
    ctx.admin.namespaces.revoke_subscription_permission(namespace, subscription, role)


@admin_command(namespaces, "set-subscription-auth-mode")
@click.argument("namespace")
@click.option(
    "-m",
    "--subscription-auth-mode",
    "mode",
    required=True,
    type=click.Choice(["None", "Prefix"]),
    help="Prefix: subscription names must start with the subscribing role",
)
def namespaces_set_subscription_auth_mode(ctx: AdminContext, namespace: str, mode: str) -> None:
    """Set how subscription names are checked against the subscribing role."""
    ctx.admin.namespaces.set_policy(namespace, "subscriptionAuthMode", mode)


@admin_command(namespaces, "get-subscription-auth-mode")
@click.argument("namespace")
def namespaces_get_subscription_auth_mode(ctx: AdminContext, namespace: str) -> None:
    """Show the namespace's subscription auth mode (None or Prefix)."""
    ctx.show(ctx.admin.namespaces.get_policy(namespace, "subscriptionAuthMode"))


# --- topics ------------------------------------------------------------------------------------


@admin_command(topics, "permissions")
@click.argument("topic")
def topics_permissions(ctx: AdminContext, topic: str) -> None:
    """Show the roles granted actions on a topic (its namespace's grants included)."""
    ctx.show(ctx.admin.topics.permissions(check_topic(topic)))


@admin_command(topics, "grant-permission")
@click.argument("topic")
@_ROLE
@_ACTIONS
def topics_grant_permission(
    ctx: AdminContext, topic: str, role: str, actions: tuple[str, ...]
) -> None:
    """Let a role do actions on a topic (every partition of a partitioned topic)."""
    ctx.admin.topics.grant_permission(check_topic(topic), role, _actions(actions))


@admin_command(topics, "revoke-permission")
@click.argument("topic")
@_ROLE
def topics_revoke_permission(ctx: AdminContext, topic: str, role: str) -> None:
    """Take back what a role was granted on a topic itself."""
    ctx.admin.topics.revoke_permission(check_topic(topic), role)
