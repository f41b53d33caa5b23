"""The README's first command installs Starquake without extras: ``starquake standalone`` and
the client must then work without NATS (the ``cluster`` extra) and without Spark, so the
broker imports cluster mode's NATS parts only when ``metadataStoreUrl`` asks for them."""

from __future__ import annotations

import subprocess
import sys
import textwrap
from pathlib import Path

# Runs a real standalone broker on free ports in a child process whose imports of the
# optional extras' packages fail, as they would where those extras are not installed.
_CHILD = textwrap.dedent(
    """
    import asyncio, sys

    BLOCKED = ("nats", "pyspark", "pyarrow")

    class NotInstalled:
        def find_spec(self, name, path=None, target=None):
            if name.split(".")[0] in BLOCKED:
                raise ModuleNotFoundError(f"No module named {name!r} (blocked)")
            return None

    sys.meta_path.insert(0, NotInstalled())

    import starquake.cli.main  # noqa: F401  (the command line loads all its commands)
    import starquake.client  # noqa: F401
    from starquake.client.asyncio import Client
    from starquake.broker.config import BrokerConfig
    from starquake.broker.server import BrokerServer

    async def main() -> None:
        config = BrokerConfig(dataDir=sys.argv[1], brokerServicePort=0, webServicePort=0)
        server = BrokerServer(config)
        await server.start()
        client = Client(f"pulsar://127.0.0.1:{server.broker_port}")
        try:
            producer = await client.create_producer("persistent://public/default/no-extras")
            await producer.send(b"x")
        finally:
            await client.close()
            await server.stop()

    asyncio.run(main())
    loaded = sorted({m.split(".")[0] for m in sys.modules} & set(BLOCKED))
    print("loaded:", loaded)
    """
)


def test_standalone_broker_and_client_need_no_extras(tmp_path: Path) -> None:
    result = subprocess.run(
        [sys.executable, "-c", _CHILD, str(tmp_path / "data")],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert result.returncode == 0, result.stderr[-3000:]
    assert "loaded: []" in result.stdout, result.stdout
