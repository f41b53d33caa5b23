"""``starquake client``: the group and its commands (``produce`` in ``client_commands``,
``consume`` and ``read`` in ``client_receive``), assembled."""

from __future__ import annotations

from starquake.cli.client_commands import client
from starquake.cli.client_receive import consume, read

client.add_command(consume)
client.add_command(read)

__all__ = ["client"]
