"""Security keys of a Pulsar ``broker.conf`` are honoured or refused at start, never silently
ignored: ``authenticateMetricsEndpoint=true`` makes ``/metrics`` ask for credentials (from a
file and from ``-D``), ``tokenAllowedClockSkewSeconds`` lets a late token in; a key Starquake
cannot honour stops the broker with one line naming it
unless it has Pulsar's default value; keys of the broker's own client are accepted with a line
saying they have no effect."""

from __future__ import annotations

import urllib.error
import urllib.request
import uuid
from pathlib import Path

import pulsar
import pytest
from auth_support import TOKEN_PROVIDER, assert_refused, hs256, produce_consume, secret_key
from broker_process import BrokerProcess

from starquake.broker.config import ConfigError, load_config
from starquake.broker.pulsar_settings import NOT_USED, REFUSED

KEY = secret_key()


class ConfBroker(BrokerProcess):
    """A broker process started with ``--config`` (a broker.conf file)."""

    def __init__(self, data_dir: Path, conf: Path, *defines: str) -> None:
        super().__init__(data_dir, *defines, log_level="INFO")
        self.conf = conf

    def command(self) -> list[str]:
        return [*super().command(), "--config", str(self.conf)]


def _conf(tmp_path: Path, lines: dict[str, str]) -> Path:
    key_file = tmp_path / "secret.key"
    key_file.write_bytes(KEY)
    settings = {
        "authenticationEnabled": "true",
        "authenticationProviders": TOKEN_PROVIDER,
        "tokenSecretKey": f"file://{key_file}",
        **lines,
    }
    path = tmp_path / "broker.conf"
    path.write_text("".join(f"{k}={v}\n" for k, v in settings.items()))
    return path


def _metrics_status(broker: BrokerProcess, token: str | None = None) -> int:
    headers = {"Authorization": f"Bearer {token}"} if token else {}
    request = urllib.request.Request(f"{broker.web_service_url}/metrics", headers=headers)
    try:
        with urllib.request.urlopen(request, timeout=10) as reply:
            return int(reply.status)
    except urllib.error.HTTPError as error:
        error.close()
        return int(error.code)


@pytest.mark.parametrize("where", ["broker.conf", "-D"])
def test_authenticate_metrics_endpoint(tmp_path: Path, where: str) -> None:
    if where == "broker.conf":
        broker = ConfBroker(
            tmp_path / "data", _conf(tmp_path, {"authenticateMetricsEndpoint": "true"})
        )
    else:
        broker = ConfBroker(
            tmp_path / "data", _conf(tmp_path, {}), "authenticateMetricsEndpoint=true"
        )
    broker.start()
    try:
        assert _metrics_status(broker) == 401
        assert _metrics_status(broker, hs256(secret_key(), "forged")) == 401
        assert _metrics_status(broker, hs256(KEY, "scraper")) == 200
    finally:
        broker.cleanup()


def test_metrics_open_by_default_and_pulsar_defaults_accepted(tmp_path: Path) -> None:
    """A broker.conf with every listed key at Pulsar's default starts; keys of the broker's own
    client get a line saying they have no effect."""
    lines = {key: default for key, (default, _) in REFUSED.items()}
    lines.update({key: default for key, (default, _) in NOT_USED.items()})
    lines["brokerClientAuthenticationPlugin"] = (
        "org.apache.pulsar.client.impl.auth.AuthenticationToken"
    )
    lines["brokerClientAuthenticationParameters"] = "token:abc"
    lines["brokerClientTlsEnabled"] = "true"
    lines["tlsEnabled"] = "true"  # deprecated, set by Pulsar's test configurations
    lines["brokerClientTrustCertsFilePath"] = "/etc/ca.pem"
    lines["brokerClientTlsProtocols"] = "TLSv1.3"
    lines["brokerClientTlsTrustStore"] = "/etc/truststore.jks"
    broker = ConfBroker(tmp_path / "data", _conf(tmp_path, lines))
    broker.start()
    try:
        assert _metrics_status(broker) == 200
        log = broker.log()
        assert "brokerClientTlsProtocols has no effect: the broker's own client" in log
        assert "brokerClientTlsTrustStore has no effect" in log
        assert "brokerClientTlsEnabled has no effect" not in log  # used in cluster mode
        assert "tlsEnabled has no effect: it is deprecated in Pulsar" in log
        assert "token:abc" not in log  # a secret is never logged
    finally:
        broker.cleanup()


@pytest.mark.parametrize(
    ("key", "value"),
    [
        ("proxyRoles", "proxy"),
        ("authorizationProvider", "com.example.MyAuthorizationProvider"),
        ("tlsEnabledWithKeyStore", "true"),
        ("saslJaasClientAllowedIds", ".*"),
    ],
)
def test_unsupported_key_stops_the_broker(tmp_path: Path, key: str, value: str) -> None:
    broker = ConfBroker(tmp_path / "data", _conf(tmp_path, {key: value}))
    with pytest.raises(RuntimeError):
        broker.start()
    lines = [line for line in broker.log().splitlines() if key in line]
    assert len(lines) == 1, lines
    assert lines[0].startswith(f"starquake: {key}={value} is not supported: {REFUSED[key][1]}")


def test_every_refused_key_is_named_from_minus_d() -> None:
    for key, (default, _) in REFUSED.items():
        other = "true" if default == "false" else "7" if default.replace(".", "").isdigit() else "x"
        with pytest.raises(ConfigError, match=f"^{key}={other} is not supported"):
            load_config(overrides={key: other}, environ={})
        assert load_config(overrides={key: default}, environ={}).extra[key] == default
    for key in NOT_USED:
        assert key in load_config(overrides={key: "anything"}, environ={}).extra
    with pytest.raises(ConfigError, match=r"^proxyRoles=p is not supported"):
        load_config(environ={"STARQUAKE_proxyRoles": "p"})
    with pytest.raises(ConfigError, match="unknown configuration key"):
        load_config(overrides={"authenticateMetricEndpoint": "true"}, environ={})  # a typo


def test_token_allowed_clock_skew(tmp_path: Path) -> None:
    """``tokenAllowedClockSkewSeconds`` accepts a token that long after its expiry, no longer."""
    broker = ConfBroker(tmp_path / "data", _conf(tmp_path, {}), "tokenAllowedClockSkewSeconds=300")
    broker.start()
    try:
        topic = f"persistent://public/default/skew-{uuid.uuid4().hex[:8]}"
        late = pulsar.AuthenticationToken(hs256(KEY, "late", expires_in=-60))
        produce_consume(pulsar, broker.url, late, topic)
        too_late = pulsar.AuthenticationToken(hs256(KEY, "late", expires_in=-400))
        assert_refused(pulsar, broker.url, too_late, topic)
    finally:
        broker.cleanup()
