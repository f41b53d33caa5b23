"""Wrapping a message data key with a public key, and unwrapping it with the private key.

Two kinds of key, as Pulsar's Java client supports them:

- **RSA**: OAEP with SHA-1 and MGF1-SHA-1 (also what the official C++-based clients use).
- **EC** (Pulsar calls them ECDSA keys): ECIES as Bouncy Castle's ``ECIES`` cipher with its
  default parameters computes it. An ephemeral key pair on the recipient's curve; ``V``, its
  public point, uncompressed; ``Z``, the ECDH shared secret (the x coordinate, padded to the
  field size); KDF2 with SHA-1 over ``V || Z`` gives a 16-byte MAC key followed by a key
  stream as long as the data; the data is XOR-ed with the stream; the tag is HMAC-SHA1 over
  the ciphertext and an 8-byte zero length label. The wrapped key is ``V || C || T``.
  The official Python client reads RSA keys only, so EC-wrapped keys interoperate with the
  Java client and with ours.
"""

from __future__ import annotations

import hashlib
import hmac
from collections.abc import Callable
from typing import cast

from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec, padding, rsa

from starquake.client.exceptions import CryptoError

__all__ = ["PrivateKey", "PublicKey", "load_private", "load_public", "unwrap", "wrap"]

PublicKey = rsa.RSAPublicKey | ec.EllipticCurvePublicKey
PrivateKey = rsa.RSAPrivateKey | ec.EllipticCurvePrivateKey

_MAC_KEY_LEN = 16  # 128-bit MAC key, Bouncy Castle's default for ECIES without a cipher
_TAG_LEN = 20  # HMAC-SHA1
_LENGTH_LABEL = bytes(8)  # bit length of the (absent) encoding parameter, as 8 bytes
_KEY_TYPES = (
    rsa.RSAPublicKey,
    ec.EllipticCurvePublicKey,
    rsa.RSAPrivateKey,
    ec.EllipticCurvePrivateKey,
)


def _oaep() -> padding.OAEP:
    return padding.OAEP(mgf=padding.MGF1(hashes.SHA1()), algorithm=hashes.SHA1(), label=None)


def _load(loader: Callable[[bytes], object], pem: bytes, kind: str, key_name: str) -> object:
    try:
        key = loader(pem)
    except (ValueError, TypeError) as exc:
        raise CryptoError(f"cannot load {kind} key {key_name!r}: {exc}") from exc
    if not isinstance(key, _KEY_TYPES):
        raise CryptoError(f"{kind} key {key_name!r} is neither an RSA nor an EC key")
    return key


def load_public(pem: bytes, key_name: str) -> PublicKey:
    """The RSA or EC public key in ``pem``; :class:`CryptoError` for anything else."""
    return cast(PublicKey, _load(serialization.load_pem_public_key, pem, "public", key_name))


def load_private(pem: bytes, key_name: str) -> PrivateKey:
    """The RSA or EC private key in ``pem`` (an ``EC PARAMETERS`` block before an EC key, as
    ``openssl ecparam -genkey`` writes, is allowed)."""
    key = _load(
        lambda data: serialization.load_pem_private_key(data, password=None),
        pem,
        "private",
        key_name,
    )
    return cast(PrivateKey, key)


def _kdf2_sha1(secret: bytes, length: int) -> bytes:
    blocks = []
    for counter in range(1, -(-length // 20) + 1):
        blocks.append(hashlib.sha1(secret + counter.to_bytes(4, "big")).digest())
    return b"".join(blocks)[:length]


def _xor(data: bytes, stream: bytes) -> bytes:
    return (int.from_bytes(data, "big") ^ int.from_bytes(stream, "big")).to_bytes(len(data), "big")


def _ecies_keys(shared_input: bytes, length: int) -> tuple[bytes, bytes]:
    material = _kdf2_sha1(shared_input, _MAC_KEY_LEN + length)
    return material[:_MAC_KEY_LEN], material[_MAC_KEY_LEN:]


def _tag(mac_key: bytes, ciphertext: bytes) -> bytes:
    return hmac.new(mac_key, ciphertext + _LENGTH_LABEL, hashlib.sha1).digest()


def wrap(key: PublicKey, data: bytes) -> bytes:
    """``data`` (a data key) encrypted for the holder of ``key``'s private key."""
    if isinstance(key, rsa.RSAPublicKey):
        return key.encrypt(data, _oaep())
    ephemeral = ec.generate_private_key(key.curve)
    point = ephemeral.public_key().public_bytes(
        serialization.Encoding.X962, serialization.PublicFormat.UncompressedPoint
    )
    shared = ephemeral.exchange(ec.ECDH(), key)
    mac_key, stream = _ecies_keys(point + shared, len(data))
    ciphertext = _xor(data, stream)
    return point + ciphertext + _tag(mac_key, ciphertext)


def unwrap(key: PrivateKey, wrapped: bytes) -> bytes:
    """The data key in ``wrapped``; :class:`ValueError` when ``key`` does not open it."""
    if isinstance(key, rsa.RSAPrivateKey):
        return key.decrypt(wrapped, _oaep())
    point_len = 1 + 2 * ((key.curve.key_size + 7) // 8)
    if len(wrapped) < point_len + _TAG_LEN or wrapped[0] != 4:
        raise ValueError("not an ECIES-wrapped key for this curve")
    point = wrapped[:point_len]
    ciphertext = wrapped[point_len:-_TAG_LEN]
    tag = wrapped[-_TAG_LEN:]
    sender = ec.EllipticCurvePublicKey.from_encoded_point(key.curve, point)
    shared = key.exchange(ec.ECDH(), sender)
    mac_key, stream = _ecies_keys(point + shared, len(ciphertext))
    if not hmac.compare_digest(tag, _tag(mac_key, ciphertext)):
        raise ValueError("the wrapped key's MAC does not match")
    return _xor(ciphertext, stream)
