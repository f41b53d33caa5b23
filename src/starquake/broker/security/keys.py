"""The keys of token authentication, read from Pulsar's settings.

``tokenSecretKey`` holds the raw bytes of an HMAC key (``pulsar tokens create-secret-key``
writes them); ``tokenPublicKey`` an RSA or EC public key, DER (SubjectPublicKeyInfo, as
``pulsar tokens create-key-pair`` writes it) or PEM. Both take the forms of
:mod:`starquake.common.key_url`. Problems are :class:`ConfigError` naming the setting.
"""

from __future__ import annotations

from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import ec, rsa

from starquake.broker.config import ConfigError
from starquake.common.key_url import KeyUrlError, read_key_url

PublicKey = rsa.RSAPublicKey | ec.EllipticCurvePublicKey


def read_setting(key: str, value: str) -> bytes:
    """The key bytes that setting ``key`` names."""
    try:
        return read_key_url(value)
    except KeyUrlError as exc:
        raise ConfigError(f"{key}: {exc}") from None


def secret_key(value: str) -> bytes:
    """The HMAC key of ``tokenSecretKey``."""
    data = read_setting("tokenSecretKey", value)
    if len(data) < 32:
        raise ConfigError(
            f"tokenSecretKey: the key has {len(data)} bytes; HS256 needs at least 32 "
            "(create one with: starquake tokens create-secret-key)"
        )
    return data


def public_key(value: str, algorithm: str) -> PublicKey:
    """The public key of ``tokenPublicKey``, checked against ``tokenPublicAlg``."""
    data = read_setting("tokenPublicKey", value)
    try:
        if data.lstrip().startswith(b"-----BEGIN"):
            key = serialization.load_pem_public_key(data)
        else:
            key = serialization.load_der_public_key(data)
    except ValueError:
        raise ConfigError(
            "tokenPublicKey: not a DER or PEM public key (create a key pair with: "
            "starquake tokens create-key-pair)"
        ) from None
    if algorithm.startswith("RS") and isinstance(key, rsa.RSAPublicKey):
        return key
    if algorithm.startswith("ES") and isinstance(key, ec.EllipticCurvePublicKey):
        return key
    kind = type(key).__name__.lstrip("_")
    raise ConfigError(f"tokenPublicKey: a {kind} cannot verify {algorithm} tokens (tokenPublicAlg)")
