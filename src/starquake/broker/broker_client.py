"""The broker's own client: how a broker of a cluster connects to the others.

Pulsar's broker sends the ends of transactions (END_TXN_ON_PARTITION, END_TXN_ON_SUBSCRIPTION)
through its internal client, configured by the ``brokerClient*`` settings:

- ``brokerClientAuthenticationPlugin`` and ``brokerClientAuthenticationParameters``: the
  credentials presented (when the plugin is set); the other brokers accept the coordinator's
  requests from a super user only when authentication and authorization are on.
- ``brokerClientTlsEnabled``: connect to the other brokers' TLS URL (``pulsar+ssl://``), trusting
  ``brokerClientTrustCertsFilePath`` (when empty, Pulsar takes ``tlsCertificateFilePath``, the
  broker's own certificate, which is right for self-signed broker certificates),
  presenting ``brokerClientCertificateFilePath`` and ``brokerClientKeyFilePath`` when set, and
  accepting any certificate with ``tlsAllowInsecureConnection``.
"""

from __future__ import annotations

from starquake.broker.config import BrokerConfig
from starquake.client.base._auth import Authentication
from starquake.client.base._config import ClientConfig

PLACEHOLDER_URL = "pulsar://127.0.0.1:6650"
"""The service URL of the config: never used (each connection names its broker's URL)."""


def broker_client_config(config: BrokerConfig) -> ClientConfig:
    """The client settings of the broker's connections to the other brokers."""
    authentication = None
    plugin = config.brokerClientAuthenticationPlugin.strip()
    if plugin:
        authentication = Authentication(plugin, config.brokerClientAuthenticationParameters)
    if not config.brokerClientTlsEnabled:
        return ClientConfig(PLACEHOLDER_URL, authentication=authentication)
    trust = config.brokerClientTrustCertsFilePath.strip() or config.tlsCertificateFilePath
    return ClientConfig(
        PLACEHOLDER_URL,
        use_tls=True,
        tls_trust_certs_file_path=trust or None,
        tls_allow_insecure_connection=config.tlsAllowInsecureConnection,
        tls_certificate_file_path=config.brokerClientCertificateFilePath.strip() or None,
        tls_private_key_file_path=config.brokerClientKeyFilePath.strip() or None,
        authentication=authentication,
    )
