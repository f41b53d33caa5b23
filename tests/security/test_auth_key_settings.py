"""The forms a key setting takes (``data:``, ``file:``, a path, base64 text), and the client's
authentication parameter strings."""

from __future__ import annotations

import base64
from pathlib import Path

import pytest

from starquake.client import (
    Authentication,
    AuthenticationBasic,
    AuthenticationTLS,
    AuthenticationToken,
)
from starquake.common.key_url import KeyUrlError, read_key_url


def test_key_url_forms(tmp_path: Path) -> None:
    key = bytes(range(40))
    path = tmp_path / "my key"
    path.write_bytes(key)
    encoded = base64.b64encode(key).decode()
    assert read_key_url(f"data:;base64,{encoded}") == key
    assert read_key_url(f"data:application/octet-stream;base64,{encoded}") == key
    assert read_key_url("data:,plain%20text") == b"plain text"
    assert read_key_url(f"file://{path}".replace(" ", "%20")) == key
    assert read_key_url(f"file:{path}") == key
    assert read_key_url(str(path)) == key
    assert read_key_url(encoded) == key
    for bad in ("", "data:;base64", "data:;base64,@@@", "file:///no/such/file", "/no/such.key"):
        with pytest.raises(KeyUrlError):
            read_key_url(bad)


def test_token_parameter_strings(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    token_file = tmp_path / "token"
    token_file.write_text("from-file\n")
    monkeypatch.setenv("MY_TOKEN", "from-env")
    plugin = "org.apache.pulsar.client.impl.auth.AuthenticationToken"
    cases = {
        "token:abc": b"abc",
        f"file://{token_file}": b"from-file",
        "env:MY_TOKEN": b"from-env",
        '{"token": "json"}': b"json",
        f'{{"file": "{token_file}"}}': b"from-file",
        "bare": b"bare",
    }
    for params, data in cases.items():
        auth = Authentication(plugin, params)
        assert auth.method_name == "token"
        assert auth.command_data() == data, params
    assert Authentication("token", "token:abc").http_headers() == {"Authorization": "Bearer abc"}


def test_basic_and_tls_parameter_strings() -> None:
    basic = Authentication("basic", '{"userId": "u", "password": "p:w"}')
    assert basic.method_name == "basic" and basic.command_data() == b"u:p:w"
    assert basic.http_headers() == {"Authorization": "Basic " + base64.b64encode(b"u:p:w").decode()}
    custom = AuthenticationBasic("u", "p", "oms3.0")
    assert custom.method_name == "oms3.0"
    tls = Authentication(
        "org.apache.pulsar.client.impl.auth.AuthenticationTls",
        "tlsCertFile:/c.pem,tlsKeyFile:/k.pem",
    )
    assert tls.method_name == "tls" and tls.tls_certificate_paths == ("/c.pem", "/k.pem")
    assert AuthenticationTLS("/c", "/k").command_data() == b""
    # as the official client: an unknown plugin or incomplete parameters are accepted here and
    # fail with AuthenticationError when the client connects (test_parity_auth_errors.py)
    for plugin, params in (
        ("kerberos", "x"),
        ("basic", '{"userId": "u"}'),
        ("tls", "tlsCertFile:/c"),
        ("token", ""),
    ):
        assert isinstance(Authentication(plugin, params), Authentication)
    with pytest.raises(ValueError):
        AuthenticationToken(42)
