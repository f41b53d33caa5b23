"""``starquake admin schemas`` against a real broker: upload, get, test, delete."""

from __future__ import annotations

import json
import uuid
from pathlib import Path
from typing import Any

from click.testing import CliRunner

from starquake.broker.embedded import EmbeddedBroker
from starquake.cli.main import cli

RECORD = {"type": "record", "name": "R", "fields": [{"name": "a", "type": "string"}]}


def _admin(broker: EmbeddedBroker, *args: str) -> tuple[int, Any, str]:
    result = CliRunner().invoke(
        cli, ["admin", "--admin-url", broker.web_service_url, "--output", "json", *args]
    )
    out = json.loads(result.stdout) if result.stdout.strip() else None
    return result.exit_code, out, result.stderr


def _file(tmp_path: Path, name: str, definition: object) -> str:
    path = tmp_path / name
    path.write_text(json.dumps({"type": "AVRO", "schema": json.dumps(definition)}))
    return str(path)


def test_schemas_commands(broker: EmbeddedBroker, tmp_path: Path) -> None:
    topic = f"public/default/cli-{uuid.uuid4().hex[:8]}"
    v1 = _file(tmp_path, "v1.json", RECORD)
    bad = {**RECORD, "fields": [*RECORD["fields"], {"name": "b", "type": "int"}]}
    v2_bad = _file(tmp_path, "v2.json", bad)
    assert _admin(broker, "schemas", "upload", topic, "-f", v1)[:2] == (0, {"version": 0})
    code, got, _ = _admin(broker, "schemas", "get", topic)
    assert code == 0 and got["version"] == 0 and json.loads(got["data"]) == RECORD

    code, verdict, _ = _admin(broker, "schemas", "compatibility", topic, "-f", v2_bad)
    assert code == 0 and verdict["isCompatibility"] is False  # FULL: b has no default

    code, _, err = _admin(broker, "schemas", "upload", topic, "-f", v2_bad)
    assert code == 1 and "not backward compatible" in err

    code, versions, _ = _admin(broker, "schemas", "get", topic, "--all-versions")
    assert code == 0 and [v["version"] for v in versions] == [0]

    assert _admin(broker, "schemas", "delete", topic)[0] == 0
    code, _, err = _admin(broker, "schemas", "get", topic)
    assert code != 0 and "not found" in err.lower()

    (tmp_path / "junk.json").write_text("[1, 2]")
    code, _, err = _admin(broker, "schemas", "upload", topic, "-f", str(tmp_path / "junk.json"))
    assert code == 2 and "type" in err
