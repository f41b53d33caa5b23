"""PEM key pairs for the end-to-end encryption tests, and an independent decryption of a
payload delivered still encrypted (what an application does with an encryption context)."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec, padding, rsa
from cryptography.hazmat.primitives.ciphers.aead import AESGCM


@dataclass(frozen=True)
class KeyPair:
    public: str
    private: str


def rsa_pair(directory: Path, name: str, *, traditional: bool = False) -> KeyPair:
    """A 2048-bit RSA key pair written as PEM (SubjectPublicKeyInfo; PKCS#8 or, with
    ``traditional``, PKCS#1 private key)."""
    key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    fmt = (
        serialization.PrivateFormat.TraditionalOpenSSL
        if traditional
        else serialization.PrivateFormat.PKCS8
    )
    return _write(directory, name, key, fmt)


def ec_pair(directory: Path, name: str) -> KeyPair:
    """A P-256 EC key pair written as PEM."""
    key = ec.generate_private_key(ec.SECP256R1())
    return _write(directory, name, key, serialization.PrivateFormat.PKCS8)


def _write(directory: Path, name: str, key: Any, fmt: serialization.PrivateFormat) -> KeyPair:
    public = directory / f"{name}.pub.pem"
    private = directory / f"{name}.key.pem"
    public.write_bytes(
        key.public_key().public_bytes(
            serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo
        )
    )
    private.write_bytes(
        key.private_bytes(serialization.Encoding.PEM, fmt, serialization.NoEncryption())
    )
    return KeyPair(str(public), str(private))


def open_payload(context: Any, payload: bytes, private_key_path: str) -> bytes:
    """Decrypt a payload delivered still encrypted, from its encryption context alone:
    unwrap the data key (RSA-OAEP, SHA-1), then AES-256-GCM with the context's IV."""
    with open(private_key_path, "rb") as f:
        private = serialization.load_pem_private_key(f.read(), password=None)
    assert isinstance(private, rsa.RSAPrivateKey)
    oaep = padding.OAEP(mgf=padding.MGF1(hashes.SHA1()), algorithm=hashes.SHA1(), label=None)
    data_key = private.decrypt(context.keys()[0].value, oaep)
    return AESGCM(data_key).decrypt(context.param(), payload, None)
