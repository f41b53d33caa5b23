"""Where basic authentication finds its htpasswd file, as in Pulsar: the ``basicAuthConf`` key
first, else the Java system property ``pulsar.auth.basic.conf``, which Pulsar's standalone is
given through ``PULSAR_EXTRA_OPTS`` (``-Dpulsar.auth.basic.conf=/path/.htpasswd``) and which
``starquake standalone`` also takes as ``-D pulsar.auth.basic.conf=...``. The value is a path,
a ``file:``/``data:`` URL or the file's content in base64. Each through a broker process and
the official client."""

from __future__ import annotations

import base64
import uuid
from pathlib import Path

import pulsar
import pytest
from auth_support import BASIC_PROVIDER, HASHES, assert_refused, htpasswd, produce_consume
from broker_process import BrokerProcess

from starquake.broker.config import load_config


def _topic() -> str:
    return f"persistent://public/default/basic-conf-{uuid.uuid4().hex[:8]}"


def _users(directory: Path) -> Path:
    return htpasswd(
        directory / ".htpasswd",
        {"superuser": HASHES["apr1"]("admin"), "other": HASHES["bcrypt"]("other-pw")},
    )


def _check(broker: BrokerProcess, user: str, password: str) -> None:
    broker.start()
    try:
        produce_consume(pulsar, broker.url, pulsar.AuthenticationBasic(user, password), _topic())
        assert_refused(pulsar, broker.url, pulsar.AuthenticationBasic(user, "wrong"), _topic())
    finally:
        broker.cleanup()


def test_pulsar_extra_opts_names_the_file(tmp_path: Path) -> None:
    conf = _users(tmp_path)
    opts = f"-Dpulsar.allocator.exit_on_oom=true -Dpulsar.auth.basic.conf={conf} -Xmx1g"
    broker = BrokerProcess(
        tmp_path / "data",
        "authenticationEnabled=true",
        f"authenticationProviders={BASIC_PROVIDER}",
        env={"PULSAR_EXTRA_OPTS": opts},
    )
    _check(broker, "superuser", "admin")


def test_system_property_on_the_command_line_as_base64(tmp_path: Path) -> None:
    content = base64.b64encode(_users(tmp_path).read_bytes()).decode()
    broker = BrokerProcess(
        tmp_path / "data",
        "authenticationEnabled=true",
        "authenticationProviders=basic",
        f"pulsar.auth.basic.conf={content}",
    )
    _check(broker, "other", "other-pw")


def test_basic_auth_conf_key_wins_over_the_property(tmp_path: Path) -> None:
    conf = _users(tmp_path)
    elsewhere = htpasswd(tmp_path / "elsewhere", {"nobody": HASHES["apr1"]("x")})
    broker = BrokerProcess(
        tmp_path / "data",
        "authenticationEnabled=true",
        "authenticationProviders=basic",
        f"basicAuthConf=file://{conf}",
        env={"PULSAR_EXTRA_OPTS": f"-Dpulsar.auth.basic.conf={elsewhere}"},
    )
    _check(broker, "superuser", "admin")


def test_without_any_file_the_broker_names_both_ways(tmp_path: Path) -> None:
    broker = BrokerProcess(
        tmp_path / "data",
        "authenticationEnabled=true",
        "authenticationProviders=basic",
        env={"PULSAR_EXTRA_OPTS": "-Dpulsar.allocator.exit_on_oom=true"},
    )
    with pytest.raises(RuntimeError, match=r"basicAuthConf.*PULSAR_EXTRA_OPTS"):
        broker.start()


def test_property_parsing() -> None:
    env = {"PULSAR_EXTRA_OPTS": "-Dpulsar.auth.basic.conf='/a b/x' -Dpulsar.auth.basic.conf=/y"}
    assert load_config(environ=env).basicAuthConf == "/y"  # the last one wins, as in the JVM
    env = {"PULSAR_EXTRA_OPTS": "-Dpulsar.auth.basic.conf='/a b/x'"}
    assert load_config(environ=env).basicAuthConf == "/a b/x"
    given = {"pulsar.auth.basic.conf": "/cli"}
    assert load_config(overrides=given, environ=env).basicAuthConf == "/cli"
    assert load_config(environ={}).basicAuthConf == ""
