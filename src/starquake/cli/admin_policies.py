"""Topic and namespace policies from the command line, named as pulsar-admin names them.

``starquake admin topics set-X|get-X|remove-X TOPIC`` set, show and remove a policy on one
topic (on every partition of a partitioned topic); ``get-X --applied`` shows the value in force
(the topic's, else the namespace's, else the broker's). ``starquake admin namespaces ...`` does
the same for the policies a namespace sets for all its topics. Sizes take k/M/G/T suffixes
(``10M``), times s/m/h/d/w (``90s``, ``1h``), as pulsar-admin takes them.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import Any

import click

from starquake.cli.admin_group import AdminContext, admin_command, namespaces, topics
from starquake.cli.params import check_topic, relative_seconds

_SIZE = re.compile(r"(-?\d+)([kmgt]?)b?")
_SIZE_UNITS = {"": 1, "k": 1024, "m": 1024**2, "g": 1024**3, "t": 1024**4}
BACKLOG_POLICIES = ("producer_request_hold", "producer_exception", "consumer_backlog_eviction")
BACKLOG_TYPES = ("destination_storage", "message_age")
DELETE_MODES = ("delete_when_no_subscriptions", "delete_when_subscriptions_caught_up")


def _bytes(text: str, hint: str) -> int:
    """``4096``, ``10M``, ``16G`` in bytes (a bare number is bytes); -1 stays -1."""
    match = _SIZE.fullmatch(text.strip().lower())
    if not match:
        raise click.BadParameter(
            f"invalid size {text!r}: a number with k, M, G or T", param_hint=hint
        )
    value = int(match.group(1))
    return -1 if value < 0 else value * _SIZE_UNITS[match.group(2)]


class _Scope:
    """Where a policy lives: on a topic (``topics``) or on a namespace (``namespaces``)."""

    def __init__(self, group: click.Group, argument: str) -> None:
        self.group = group
        self.argument = argument

    def arg(self) -> Callable[[Any], Any]:
        """The command's TOPIC or NAMESPACE argument (passed as ``target``)."""
        return click.argument("target", metavar=self.argument.upper())

    @property
    def is_topic(self) -> bool:
        return self.argument == "topic"

    def name(self, value: str) -> str:
        return check_topic(value) if self.is_topic else value

    def get(self, ctx: AdminContext, target: str, policy: str, applied: bool) -> Any:
        if self.is_topic:
            return ctx.admin.topic_policies.get(target, policy, applied)
        return ctx.admin.namespaces.get_policy(target, policy)

    def set(self, ctx: AdminContext, target: str, policy: str, value: Any) -> None:
        if self.is_topic:
            ctx.admin.topic_policies.set(target, policy, value)
        else:
            ctx.admin.namespaces.set_policy(target, policy, value)

    def remove(self, ctx: AdminContext, target: str, policy: str) -> None:
        if self.is_topic:
            ctx.admin.topic_policies.remove(target, policy)
        else:
            ctx.admin.namespaces.remove_policy(target, policy)


TOPIC = _Scope(topics, "topic")
NAMESPACE = _Scope(namespaces, "namespace")

_APPLIED = click.option(
    "-ap", "--applied", is_flag=True, help="the value in force (topic, namespace or broker)"
)


def _getter_and_remover(scope: _Scope, noun: str, policy: str, what: str) -> None:
    """``get-<noun>`` and ``remove-<noun>`` of ``policy``."""

    def get(ctx: AdminContext, target: str, applied: bool = False) -> None:
        ctx.show(scope.get(ctx, scope.name(target), policy, applied))

    get.__doc__ = f"Show the {what} (null: not set here)."
    if scope.is_topic:
        get = _APPLIED(get)
    admin_command(scope.group, f"get-{noun}")(scope.arg()(get))

    def remove(ctx: AdminContext, target: str) -> None:
        scope.remove(ctx, scope.name(target), policy)

    remove.__doc__ = f"Remove the {what} (the level above applies)."
    admin_command(scope.group, f"remove-{noun}")(scope.arg()(remove))


def _setter(
    scope: _Scope,
    noun: str,
    policy: str,
    what: str,
    options: list[Callable[[Any], Any]],
    value_of: Callable[..., Any],
) -> None:
    """``set-<noun>``: ``value_of(**options)`` is the value sent."""

    def set_(ctx: AdminContext, target: str, **given: Any) -> None:
        scope.set(ctx, scope.name(target), policy, value_of(**given))

    set_.__doc__ = f"Set the {what}."
    command: Any = set_
    for option in reversed(options):
        command = option(command)
    admin_command(scope.group, f"set-{noun}")(scope.arg()(command))


def _int_policy(scope: _Scope, noun: str, policy: str, what: str, *flags: str) -> None:
    """Commands of a whole-number limit (0: no limit)."""
    help_ = f"the {what} (0: no limit)"
    option = click.option(*flags, "value", type=click.IntRange(min=0), required=True, help=help_)
    _setter(scope, noun, policy, what, [option], lambda value: value)
    _getter_and_remover(scope, noun, policy, what)


# --- topics: the policies only pulsar-admin's "topics" has ------------------------------------

_setter(
    TOPIC,
    "retention",
    "retention",
    "retention of acknowledged messages",
    [
        click.option("-s", "--size", required=True, help="bytes, or 10M, 16G; -1 no limit"),
        click.option("-t", "--time", "time_", required=True, help="seconds, or 100m, 3h; -1 none"),
    ],
    lambda size, time_: {
        "retentionTimeInMinutes": max(relative_seconds(time_, "--time") // 60, -1),
        "retentionSizeInMB": max(_bytes(size, "--size") // 1024**2, -1),
    },
)
_getter_and_remover(TOPIC, "retention", "retention", "retention of acknowledged messages")

_setter(
    TOPIC,
    "message-ttl",
    "messageTTL",
    "message TTL",
    [click.option("-t", "--ttl", required=True, help="seconds, or with m/h/d (1h)")],
    lambda ttl: relative_seconds(ttl, "--ttl"),
)
_getter_and_remover(TOPIC, "message-ttl", "messageTTL", "message TTL in seconds")


def _switch(enable: bool, disable: bool) -> bool:
    if enable == disable:
        raise click.UsageError("give exactly one of --enable and --disable")
    return enable


_ENABLE = click.option("-e", "--enable", is_flag=True, help="turn it on")
_DISABLE = click.option("-d", "--disable", is_flag=True, help="turn it off")

_setter(
    TOPIC,
    "deduplication",
    "deduplicationEnabled",
    "message deduplication (the topic is reloaded)",
    [_ENABLE, _DISABLE],
    _switch,
)
_getter_and_remover(TOPIC, "deduplication", "deduplicationEnabled", "message deduplication")

_int_policy(TOPIC, "max-producers", "maxProducers", "producer limit", "-p")
_int_policy(TOPIC, "max-consumers", "maxConsumers", "consumer limit", "-c")
_int_policy(
    TOPIC,
    "max-unacked-messages-on-consumer",
    "maxUnackedMessagesOnConsumer",
    "limit of unacknowledged messages per consumer",
    "-m",
    "--maxNum",
)
_int_policy(
    TOPIC,
    "max-unacked-messages-on-subscription",
    "maxUnackedMessagesOnSubscription",
    "limit of unacknowledged messages per subscription",
    "-m",
    "--maxNum",
)

# --- namespaces: the policies only pulsar-admin's "namespaces" has ----------------------------

_int_policy(
    NAMESPACE,
    "max-producers-per-topic",
    "maxProducersPerTopic",
    "producer limit of each topic",
    "-p",
    "--max-producers-per-topic",
)
_int_policy(
    NAMESPACE,
    "max-consumers-per-topic",
    "maxConsumersPerTopic",
    "consumer limit of each topic",
    "-c",
    "--max-consumers-per-topic",
)
_int_policy(
    NAMESPACE,
    "max-unacked-messages-per-consumer",
    "maxUnackedMessagesPerConsumer",
    "limit of unacknowledged messages per consumer",
    "-c",
    "--max-unacked-messages-per-consumer",
)
_int_policy(
    NAMESPACE,
    "max-unacked-messages-per-subscription",
    "maxUnackedMessagesPerSubscription",
    "limit of unacknowledged messages per subscription",
    "-c",
    "--max-unacked-messages-per-subscription",
)

# --- both: the same commands under topics and namespaces -------------------------------------

for _scope in (TOPIC, NAMESPACE):
    _setter(
        _scope,
        "compaction-threshold",
        "compactionThreshold",
        "backlog size that triggers compaction",
        [click.option("-t", "--threshold", required=True, help="bytes, or 10M, 1G; 0 never")],
        lambda threshold: _bytes(threshold, "--threshold"),
    )
    _getter_and_remover(
        _scope, "compaction-threshold", "compactionThreshold", "compaction threshold in bytes"
    )

    _setter(
        _scope,
        "delayed-delivery",
        "delayedDelivery",
        "delayed delivery",
        [
            _ENABLE,
            _DISABLE,
            click.option("-t", "--time", "tick", default="1s", show_default=True, help="tick time"),
            click.option(
                "-md",
                "--maxDelay",
                "--max-delay",
                "max_delay",
                default="0",
                show_default=True,
                help="longest delay a producer may ask (0: any)",
            ),
        ],
        lambda enable, disable, tick, max_delay: {
            "active": _switch(enable, disable),
            "tickTime": relative_seconds(tick, "--time") * 1000,
            "maxDeliveryDelayInMillis": relative_seconds(max_delay, "--maxDelay") * 1000,
        },
    )
    _getter_and_remover(_scope, "delayed-delivery", "delayedDelivery", "delayed delivery")

    _setter(
        _scope,
        "inactive-topic-policies",
        "inactiveTopicPolicies",
        "deletion of inactive topics",
        [
            click.option(
                "-e",
                "--enable-delete-while-inactive",
                "enable",
                is_flag=True,
                help="delete inactive topics",
            ),
            click.option(
                "-d",
                "--disable-delete-while-inactive",
                "disable",
                is_flag=True,
                help="keep inactive topics",
            ),
            click.option(
                "-t",
                "--max-inactive-duration",
                "duration",
                required=True,
                help="inactive this long: seconds, or 10m, 1h",
            ),
            click.option(
                "-m",
                "--delete-mode",
                "mode",
                type=click.Choice(DELETE_MODES),
                required=True,
                help="when a topic counts as inactive",
            ),
        ],
        lambda enable, disable, duration, mode: {
            "deleteWhileInactive": _switch(enable, disable),
            "maxInactiveDurationSeconds": relative_seconds(duration, "--max-inactive-duration"),
            "inactiveTopicDeleteMode": mode,
        },
    )
    _getter_and_remover(
        _scope, "inactive-topic-policies", "inactiveTopicPolicies", "inactive-topic policies"
    )


# --- backlog quotas: one per type ------------------------------------------------------------


_QUOTA_TYPE = click.option(
    "-t",
    "--type",
    "type_",
    type=click.Choice(BACKLOG_TYPES),
    default="destination_storage",
    show_default=True,
    help="what the quota limits: backlog size or the age of its oldest message",
)


def _quota_commands(scope: _Scope) -> None:
    """The backlog-quota commands of ``scope``: set, get and remove."""
    _set_quota_command(scope)

    def get_quotas(ctx: AdminContext, target: str, applied: bool = False) -> None:
        name = scope.name(target)
        if scope.is_topic:
            ctx.show(ctx.admin.topic_policies.get_backlog_quotas(name, applied))
        else:
            ctx.show(ctx.admin.namespaces.get_backlog_quotas(name))

    get_quotas.__doc__ = "Show the backlog quotas, by type."
    getter: Any = _APPLIED(get_quotas) if scope.is_topic else get_quotas
    admin_command(scope.group, "get-backlog-quotas")(scope.arg()(getter))

    def remove_quota(ctx: AdminContext, target: str, type_: str) -> None:
        name = scope.name(target)
        if scope.is_topic:
            ctx.admin.topic_policies.remove_backlog_quota(name, type_)
        else:
            ctx.admin.namespaces.remove_backlog_quota(name, type_)

    remove_quota.__doc__ = "Remove a backlog quota (the level above applies)."
    admin_command(scope.group, "remove-backlog-quota")(scope.arg()(_QUOTA_TYPE(remove_quota)))


def _set_quota_command(scope: _Scope) -> None:
    """``set-backlog-quota``: a size and/or age limit with its policy, for one type."""

    def set_quota(
        ctx: AdminContext,
        target: str,
        limit: str | None,
        limit_time: str | None,
        policy: str,
        type_: str,
    ) -> None:
        if limit is None and limit_time is None:
            raise click.UsageError("give --limit or --limitTime")
        quota = {
            "limitSize": -1 if limit is None else _bytes(limit, "--limit"),
            "limitTime": -1 if limit_time is None else relative_seconds(limit_time, "--limitTime"),
            "policy": policy,
        }
        name = scope.name(target)
        if scope.is_topic:
            ctx.admin.topic_policies.set_backlog_quota(name, quota, type_)
        else:
            ctx.admin.namespaces.set_backlog_quota(name, quota, type_)

    command: Any = set_quota
    for option in reversed(
        [
            click.option("-l", "--limit", help="backlog size: bytes, or 10M, 1G"),
            click.option(
                "-lt", "--limitTime", "--limit-time", "limit_time", help="age: seconds, or 1h"
            ),
            click.option(
                "-p",
                "--policy",
                type=click.Choice(BACKLOG_POLICIES),
                required=True,
                help="what happens past the quota",
            ),
            _QUOTA_TYPE,
        ]
    ):
        command = option(command)
    set_quota.__doc__ = "Set a backlog quota and what happens past it."
    admin_command(scope.group, "set-backlog-quota")(scope.arg()(command))


_quota_commands(TOPIC)
_quota_commands(NAMESPACE)
