"""TLS of the client side (the Pulsar client and the admin client): one ``ssl.SSLContext``
from the settings the official clients take.

- ``trust_certs_file_path``: CA certificates (PEM) that the broker's certificate must chain to;
  None or empty: the system's CAs.
- ``validate_hostname``: also check that the certificate names the host connected to (the
  official Python client's default is not to: the chain is checked, the name is not).
- ``allow_insecure_connection``: check nothing (any certificate, any name).
- ``certificate_file_path`` / ``private_key_file_path``: a client certificate and its key (PEM),
  presented when the broker asks (TLS authentication).
"""

from __future__ import annotations

import ssl


class TlsSettingsError(ValueError):
    """A TLS file that cannot be read or used (the message names the setting and file)."""


class ClientCertificateError(TlsSettingsError):
    """The client certificate or its private key cannot be read or do not go together (e.g.
    the two files swapped)."""


def client_ssl_context(
    *,
    trust_certs_file_path: str | None = None,
    allow_insecure_connection: bool = False,
    validate_hostname: bool = False,
    certificate_file_path: str | None = None,
    private_key_file_path: str | None = None,
) -> ssl.SSLContext:
    """A client SSL context (reads files: build it off an event loop, once)."""
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
    if allow_insecure_connection:
        context.check_hostname = False
        context.verify_mode = ssl.CERT_NONE
    else:
        if trust_certs_file_path:
            try:
                context.load_verify_locations(cafile=trust_certs_file_path)
            except ssl.SSLError as exc:  # before OSError, its base class
                raise TlsSettingsError(
                    f"tls_trust_certs_file_path: {trust_certs_file_path} holds no PEM CA "
                    f"certificate ({exc.reason or exc})"
                ) from None
            except OSError as exc:
                raise TlsSettingsError(
                    f"tls_trust_certs_file_path: cannot read {trust_certs_file_path}: "
                    f"{exc.strerror or exc}"
                ) from None
        else:
            context.load_default_certs(ssl.Purpose.SERVER_AUTH)
        context.check_hostname = validate_hostname
        context.verify_mode = ssl.CERT_REQUIRED
    if certificate_file_path or private_key_file_path:
        if not certificate_file_path or not private_key_file_path:
            raise TlsSettingsError(
                "a client certificate needs both tls_certificate_file_path and "
                "tls_private_key_file_path"
            )
        try:
            context.load_cert_chain(certificate_file_path, private_key_file_path)
        except ssl.SSLError as exc:
            raise ClientCertificateError(
                f"tls_certificate_file_path/tls_private_key_file_path: "
                f"{certificate_file_path} and {private_key_file_path} are not a PEM "
                f"certificate and its unencrypted private key ({exc.reason or exc})"
            ) from None
        except OSError as exc:
            raise ClientCertificateError(
                f"cannot read the client certificate {certificate_file_path} or its key "
                f"{private_key_file_path}: {exc.strerror or exc}"
            ) from None
    return context
