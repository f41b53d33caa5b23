"""``starquake admin schemas``: a topic's schema versions, as ``pulsar-admin schemas``.

A schema file holds Pulsar's upload payload, ``{"type": "AVRO", "schema": "<definition>",
"properties": {}}``.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import click

from starquake.cli.admin_group import AdminContext, admin, admin_command
from starquake.cli.params import check_topic


@admin.group("schemas")
def schemas() -> None:
    """A topic's schemas: show, upload, test, delete."""


def _payload(path: Path) -> dict[str, Any]:
    try:
        value = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:
        raise click.BadParameter(f"cannot read a JSON schema payload from {path}: {exc}") from None
    if not isinstance(value, dict) or "type" not in value:
        raise click.BadParameter(
            f'{path} must hold {{"type": ..., "schema": ..., "properties": {{...}}}}'
        )
    return value


_FILE = click.option(
    "-f",
    "--filename",
    "filename",
    required=True,
    type=click.Path(exists=True, dir_okay=False, path_type=Path),
    help='a JSON file: {"type": "AVRO", "schema": "<definition>", "properties": {}}',
)


@admin_command(schemas, "get")
@click.argument("topic")
@click.option("--version", type=int, default=None, help="this version instead of the latest")
@click.option("-a", "--all-versions", is_flag=True, help="every version since the last deletion")
def schemas_get(ctx: AdminContext, topic: str, version: int | None, all_versions: bool) -> None:
    """Show the topic's schema."""
    name = check_topic(topic)
    if all_versions:
        ctx.show(ctx.admin.schemas.versions(name), raw=False)
    else:
        ctx.show(ctx.admin.schemas.get(name, version))


@admin_command(schemas, "upload")
@click.argument("topic")
@_FILE
def schemas_upload(ctx: AdminContext, topic: str, filename: Path) -> None:
    """Register a schema (refused when the namespace's strategy finds it incompatible)."""
    version = ctx.admin.schemas.upload(check_topic(topic), _payload(filename))
    ctx.show({"version": version}, raw=False)


@admin_command(schemas, "compatibility")
@click.argument("topic")
@_FILE
def schemas_compatibility(ctx: AdminContext, topic: str, filename: Path) -> None:
    """Test whether a schema could be registered (nothing is stored)."""
    ctx.show(ctx.admin.schemas.compatibility(check_topic(topic), _payload(filename)))


@admin_command(schemas, "delete")
@click.argument("topic")
@click.option("-f", "--force", is_flag=True, help="remove every version for good")
def schemas_delete(ctx: AdminContext, topic: str, force: bool) -> None:
    """Delete the topic's schema."""
    ctx.admin.schemas.delete(check_topic(topic), force)
