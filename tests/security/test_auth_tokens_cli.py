"""``starquake tokens`` (keys and tokens, as ``pulsar tokens``) and the ``--auth-plugin`` /
``--auth-params`` options of ``starquake admin`` and ``starquake client``, against real
brokers."""

from __future__ import annotations

import base64
import json
import subprocess
import sys
import uuid
from pathlib import Path

import pulsar
import pytest
from auth_support import TOKEN_PROVIDER, produce_consume, roles
from click.testing import CliRunner, Result

from starquake import client as sq
from starquake.broker.embedded import EmbeddedBroker
from starquake.cli.main import cli


def _run(*args: str) -> Result:
    return CliRunner().invoke(cli, list(args))


def _ok(*args: str) -> str:
    result = _run(*args)
    assert result.exit_code == 0, (args, result.output, result.stderr)
    return result.stdout


def _topic() -> str:
    return f"persistent://public/default/cli-{uuid.uuid4().hex[:10]}"


def test_secret_key_then_token_then_broker(tmp_path: Path) -> None:
    key = tmp_path / "secret.key"
    _ok("tokens", "create-secret-key", "--output", str(key))
    assert len(key.read_bytes()) == 32
    assert key.stat().st_mode & 0o077 == 0  # the owner's only
    token = _ok(
        "tokens", "create", "--secret-key", f"file://{key}", "--subject", "cli-role"
    ).strip()
    expiring = _ok(
        "tokens", "create", "-sk", f"file://{key}", "-s", "cli-role", "--expiry-time", "1h"
    ).strip()
    claims = json.loads(_ok("tokens", "validate", expiring, "--secret-key", f"file://{key}"))
    assert claims["sub"] == "cli-role" and claims["exp"] > 0
    settings = {
        "authenticationEnabled": True,
        "authenticationProviders": TOKEN_PROVIDER,
        "tokenSecretKey": f"file://{key}",
    }
    with EmbeddedBroker(tmp_path / "data", **settings) as broker:
        for module in (pulsar, sq):
            client = module.Client(
                broker.service_url, authentication=module.AuthenticationToken(token)
            )
            try:
                client.create_producer(_topic()).send(b"x")
                assert "cli-role" in roles(broker)
            finally:
                client.close()
        produce_consume(sq, broker.service_url, sq.AuthenticationToken(expiring), _topic())


def test_base64_secret_key(tmp_path: Path) -> None:
    text = _ok("tokens", "create-secret-key", "--base64")
    key = base64.b64decode(text)
    assert len(key) == 32
    token = _ok(
        "tokens", "create", "--secret-key", f"data:;base64,{text}", "--subject", "b64"
    ).strip()
    header = _ok("tokens", "show", token).split("---")
    assert json.loads(header[0])["alg"] == "HS256"
    assert json.loads(header[1]) == {"sub": "b64"}


@pytest.mark.parametrize("algorithm", ["RS256", "ES256"])
def test_key_pair_then_token_then_broker(tmp_path: Path, algorithm: str) -> None:
    private, public = tmp_path / "private.key", tmp_path / "public.key"
    _ok(
        "tokens",
        "create-key-pair",
        "--signature-algorithm",
        algorithm,
        "--output-private-key",
        str(private),
        "--output-public-key",
        str(public),
    )
    token = _ok(
        "tokens",
        "create",
        "--private-key",
        f"file://{private}",
        "--subject",
        "pk-role",
        "--headers",
        "kid=key-1",
    ).strip()
    shown = _ok("tokens", "show", token).split("---")
    assert json.loads(shown[0])["alg"] == algorithm and json.loads(shown[0])["kid"] == "key-1"
    assert json.loads(_ok("tokens", "validate", token, "-pk", str(public)))["sub"] == "pk-role"
    forged = _run("tokens", "validate", token, "--secret-key", "data:;base64," + "A" * 44)
    assert forged.exit_code == 1
    settings = {
        "authenticationEnabled": True,
        "authenticationProviders": "token",
        "tokenPublicKey": f"file://{public}",
        "tokenPublicAlg": algorithm,
    }
    with EmbeddedBroker(tmp_path / "data", **settings) as broker:
        produce_consume(pulsar, broker.service_url, pulsar.AuthenticationToken(token), _topic())


def test_usage_errors(tmp_path: Path) -> None:
    assert _run("tokens", "create", "--subject", "x").exit_code == 2
    key = tmp_path / "k"
    key.write_bytes(b"short")
    result = _run("tokens", "create", "-sk", str(key), "-s", "x")
    assert result.exit_code == 2 and "at least 32" in result.output
    assert (
        _run(
            "tokens", "create", "-sk", "data:;base64," + "A" * 44, "-s", "x", "-e", "soon"
        ).exit_code
        == 2
    )


def test_auth_options_of_admin_and_client(tmp_path: Path) -> None:
    key = tmp_path / "secret.key"
    _ok("tokens", "create-secret-key", "-o", str(key))
    token = _ok("tokens", "create", "-sk", str(key), "-s", "operator").strip()
    token_file = tmp_path / "token"
    token_file.write_text(token)
    settings = {
        "authenticationEnabled": True,
        "authenticationProviders": TOKEN_PROVIDER,
        "tokenSecretKey": f"file://{key}",
    }
    with EmbeddedBroker(tmp_path / "data", **settings) as broker:
        web = ["admin", "--admin-url", broker.web_service_url, "--output", "json"]
        plugin = "org.apache.pulsar.client.impl.auth.AuthenticationToken"
        listed = _ok(
            *web[:3],
            "--auth-plugin",
            plugin,
            "--auth-params",
            f"token:{token}",
            "--output",
            "json",
            "tenants",
            "list",
        )
        assert "public" in json.loads(listed)
        refused = _run(*web, "tenants", "list")
        assert refused.exit_code == 1 and "401" in refused.stderr
        by_file = _run(
            *web[:3],
            "--auth-plugin",
            "token",
            "--auth-params",
            f"file://{token_file}",
            "tenants",
            "list",
        )
        assert by_file.exit_code == 0, by_file.output
        topic = _topic()
        produced = _run(
            "client",
            "--url",
            broker.service_url,
            "--auth-plugin",
            "token",
            "--auth-params",
            token,
            "produce",
            topic,
            "-m",
            "hi",
        )
        assert produced.exit_code == 0, produced.output
        unauthenticated = _run("client", "--url", broker.service_url, "produce", topic, "-m", "hi")
        assert unauthenticated.exit_code == 1 and "AuthenticationError" in unauthenticated.stderr
        half = _run(*web[:3], "--auth-plugin", "token", "tenants", "list")
        assert half.exit_code == 2


def test_tokens_command_does_not_import_the_broker() -> None:
    code = (
        "import sys\n"
        "from starquake.cli.main import main\n"
        "main(['tokens', '--help'])\n"
        "assert not any(m.startswith('starquake.broker') for m in sys.modules), 'broker'\n"
        "assert 'jwt' not in sys.modules\n"
    )
    subprocess.run([sys.executable, "-c", code], check=True, capture_output=True, timeout=60)
