"""TLS authentication (``AuthenticationProviderTls``): the role is the common name (CN) of the
client certificate.

Only a certificate that the TLS handshake verified against ``tlsTrustCertsFilePath`` counts: a
client on a plaintext port, without a certificate, or whose certificate was not verified
(``tlsAllowInsecureConnection``) is refused. Certificates do not expire the connection.
"""

from __future__ import annotations

from typing import ClassVar

from starquake.broker.config import BrokerConfig
from starquake.broker.security.provider import AuthenticationError, AuthResult, Credentials


class TlsAuthenticationProvider:
    """Takes the role from the verified client certificate's common name."""

    method: ClassVar[str] = "tls"

    def __init__(self, config: BrokerConfig) -> None:
        del config  # the certificate checks are the TLS context's (tlsTrustCertsFilePath)

    async def authenticate(self, credentials: Credentials) -> AuthResult:
        """The role of a connection: its verified client certificate's common name."""
        role = credentials.tls_common_name
        if not role:
            raise AuthenticationError(
                "no verified client certificate (TLS authentication needs a certificate "
                "signed by a CA the broker trusts, on a TLS port)"
            )
        return AuthResult(role, self.method)

    def close(self) -> None:
        """Nothing to release."""
