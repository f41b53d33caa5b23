"""End-to-end encryption of message payloads, interoperable with the official clients.

A producer encrypts every payload (after compression; a batch as a whole; each chunk of a
chunked message on its own) with AES-256-GCM under a random 32-byte data key and a fresh
12-byte IV; the 16-byte GCM tag follows the ciphertext. The data key is wrapped with each
named public key, RSA or EC (see :mod:`starquake.client.crypto._key_wrap`), and travels in
the message metadata (``encryption_keys``), the IV in ``encryption_param``. A producer makes a new
data key every four hours. The broker only ever sees ciphertext.

A consumer unwraps the data key with its private key (remembering unwrapped keys for four
hours, by digest of the wrapped key), decrypts, then decompresses and unbatches.
"""

from __future__ import annotations

import contextlib
import hashlib
import logging
import os
import time
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

from cryptography.exceptions import InvalidTag
from cryptography.hazmat.primitives.ciphers.aead import AESGCM

from starquake.client.base._enums import CompressionType, ConsumerCryptoFailureAction
from starquake.client.base._logging import CLIENT_LOGGER_NAME
from starquake.client.crypto._key_wrap import load_private, load_public, unwrap, wrap
from starquake.client.exceptions import CryptoError
from starquake.protocol.wire import pb

__all__ = [
    "DATA_KEY_LIFETIME_SECONDS",
    "CryptoKeyReader",
    "EncryptionContext",
    "EncryptionKey",
    "EncryptionKeyInfo",
    "MessageDecryptor",
    "MessageEncryptor",
    "encryption_context",
    "failure_action",
    "make_encryptor",
]

DATA_KEY_LIFETIME_SECONDS = 4 * 3600.0
"""How long a producer uses one data key, and a consumer remembers an unwrapped one."""

log = logging.getLogger(CLIENT_LOGGER_NAME)

_DATA_KEY_LEN = 32
_IV_LEN = 12
_TAG_LEN = 16


@dataclass(slots=True)
class EncryptionKeyInfo:
    """A key (PEM bytes) and the metadata that goes with it."""

    key: bytes
    metadata: dict[str, str] = field(default_factory=dict)


class KeyReader(Protocol):
    """What producers and consumers need from a key reader."""

    def get_public_key(self, key_name: str, metadata: dict[str, str]) -> EncryptionKeyInfo: ...

    def get_private_key(self, key_name: str, metadata: dict[str, str]) -> EncryptionKeyInfo: ...


class CryptoKeyReader:
    """Default crypto key reader implementation: the same PEM files for every key name.

    ``public_key_path`` is read by producers (to wrap data keys), ``private_key_path`` by
    consumers (to unwrap them). The files are read when a key is needed.
    """

    def __init__(self, public_key_path: str, private_key_path: str) -> None:
        """Create a crypto key reader from the paths of a PEM public and private key."""
        for name, value in (
            ("public_key_path", public_key_path),
            ("private_key_path", private_key_path),
        ):
            if not isinstance(value, str):
                raise ValueError(
                    f"Argument {name} is expected to be of type 'str' and not "
                    f"'{type(value).__name__}'"
                )
        self.public_key_path = public_key_path
        self.private_key_path = private_key_path

    @staticmethod
    def _read(path: str, key_name: str) -> EncryptionKeyInfo:
        try:
            with open(path, "rb") as f:
                return EncryptionKeyInfo(f.read())
        except OSError as exc:
            raise CryptoError(f"cannot read key {key_name!r} from {path}: {exc}") from exc

    def get_public_key(self, key_name: str, metadata: dict[str, str]) -> EncryptionKeyInfo:
        """The public key for ``key_name``."""
        return self._read(self.public_key_path, key_name)

    def get_private_key(self, key_name: str, metadata: dict[str, str]) -> EncryptionKeyInfo:
        """The private key for ``key_name``."""
        return self._read(self.private_key_path, key_name)

    def __repr__(self) -> str:
        return f"CryptoKeyReader({self.public_key_path!r}, {self.private_key_path!r})"


class MessageEncryptor:
    """A producer's encryption: one data key (renewed every :data:`DATA_KEY_LIFETIME_SECONDS`)
    wrapped for each key name."""

    def __init__(
        self,
        key_names: Sequence[str],
        reader: KeyReader,
        lifetime: float | None = None,
    ) -> None:
        """Load the public keys now; if one cannot be used, every send fails with
        :class:`CryptoError` (see :meth:`check`), as in the official client. The data key
        lives ``lifetime`` seconds (:data:`DATA_KEY_LIFETIME_SECONDS` as it is at creation)."""
        self._names = tuple(dict.fromkeys(key_names))
        self._reader = reader
        self.lifetime = DATA_KEY_LIFETIME_SECONDS if lifetime is None else lifetime
        self._data_key = b""
        self._wrapped: list[pb.EncryptionKeys] = []
        self._created = 0.0
        with contextlib.suppress(CryptoError):
            self.renew()

    def check(self) -> None:
        """Raise :class:`CryptoError` unless messages can be encrypted (retrying the keys)."""
        if not self._data_key:
            self.renew()

    def renew(self) -> None:
        """Make a new data key and wrap it with every public key."""
        data_key = os.urandom(_DATA_KEY_LEN)
        wrapped: list[pb.EncryptionKeys] = []
        if not self._names or not all(self._names):
            raise CryptoError("an encryption key name is empty")
        for name in self._names:
            info = self._reader.get_public_key(name, {})
            public = load_public(info.key, name)
            entry = pb.EncryptionKeys(key=name, value=wrap(public, data_key))
            for k, v in info.metadata.items():
                entry.metadata.add(key=k, value=v)
            wrapped.append(entry)
        self._data_key, self._wrapped = data_key, wrapped
        self._created = time.monotonic()

    @property
    def data_key(self) -> bytes:
        """The current data key (for tests of key rotation)."""
        return self._data_key

    def describe(self, meta: pb.MessageMetadata) -> None:
        """Put the wrapped data keys and a new IV in ``meta`` (before :meth:`seal`)."""
        if time.monotonic() - self._created >= self.lifetime:
            try:
                self.renew()
            except CryptoError as exc:  # keep the current data key, try again later
                log.warning("cannot renew the data key: %s", exc)
                self._created = time.monotonic()
        del meta.encryption_keys[:]
        meta.encryption_keys.extend(self._wrapped)
        meta.encryption_param = os.urandom(_IV_LEN)

    def overhead(self) -> int:
        """Bytes encryption adds to a payload."""
        return _TAG_LEN

    def seal(self, meta: pb.MessageMetadata, payload: bytes) -> bytes:
        """Encrypt ``payload`` with the IV :meth:`describe` put in ``meta`` (after
        :meth:`check` succeeded)."""
        return AESGCM(self._data_key).encrypt(meta.encryption_param, payload, None)

    def encrypt(self, meta: pb.MessageMetadata, payload: bytes) -> bytes:
        """:meth:`describe` then :meth:`seal`: the ciphertext, tag appended."""
        self.describe(meta)
        return self.seal(meta, payload)


class MessageDecryptor:
    """A consumer's decryption, remembering unwrapped data keys."""

    def __init__(self, reader: KeyReader, lifetime: float = DATA_KEY_LIFETIME_SECONDS) -> None:
        self._reader = reader
        self._lifetime = lifetime
        self._keys: dict[bytes, tuple[bytes, float]] = {}

    def _unwrap(self, entry: pb.EncryptionKeys) -> bytes | None:
        digest = hashlib.md5(entry.value, usedforsecurity=False).digest()
        cached = self._keys.get(digest)
        now = time.monotonic()
        if cached is not None and now - cached[1] < self._lifetime:
            return cached[0]
        try:
            info = self._reader.get_private_key(
                entry.key, {kv.key: kv.value for kv in entry.metadata}
            )
            data_key = unwrap(load_private(info.key, entry.key), entry.value)
        except (CryptoError, ValueError):
            return None
        self._keys = {d: v for d, v in self._keys.items() if now - v[1] < self._lifetime}
        self._keys[digest] = (data_key, now)
        return data_key

    def decrypt(self, meta: pb.MessageMetadata, payload: bytes | memoryview) -> bytes | None:
        """The plaintext of ``payload``, or None if no key named in ``meta`` opens it."""
        if len(payload) < _TAG_LEN:
            return None
        for entry in meta.encryption_keys:
            data_key = self._unwrap(entry)
            if data_key is None or len(data_key) != _DATA_KEY_LEN:
                continue
            try:
                return AESGCM(data_key).decrypt(meta.encryption_param, bytes(payload), None)
            except (InvalidTag, ValueError):
                continue
        return None


class EncryptionKey:
    """The key used for encryption: its name, the wrapped data key and its metadata."""

    __slots__ = ("_key", "_metadata", "_value")

    def __init__(self, key: str, value: bytes, metadata: dict[str, str]) -> None:
        self._key = key
        self._value = value
        self._metadata = metadata

    @property
    def key(self) -> str:
        """The key's name."""
        return self._key

    @property
    def value(self) -> bytes:
        """The data key, encrypted with this key."""
        return self._value

    @property
    def metadata(self) -> dict[str, str]:
        """The metadata associated with the key."""
        return dict(self._metadata)

    def __str__(self) -> str:
        return (
            f"EncryptionKey(key={self.key}, value_len={len(self.value)}, metadata={self.metadata})"
        )

    def __repr__(self) -> str:
        return self.__str__()


class EncryptionContext:
    """How a received message was encrypted (and compressed): what an application needs to
    decrypt a payload delivered still encrypted (``ConsumerCryptoFailureAction.CONSUME``)."""

    __slots__ = ("_algorithm", "_batch_size", "_compression", "_failed", "_keys", "_param", "_size")

    def __init__(
        self,
        keys: Iterable[EncryptionKey],
        param: bytes,
        algorithm: str,
        compression_type: CompressionType,
        uncompressed_message_size: int,
        batch_size: int,
        decryption_failed: bool,
    ) -> None:
        self._keys = list(keys)
        self._param = param
        self._algorithm = algorithm
        self._compression = compression_type
        self._size = uncompressed_message_size
        self._batch_size = batch_size
        self._failed = decryption_failed

    def keys(self) -> list[EncryptionKey]:
        """Every key the data key was encrypted with."""
        return list(self._keys)

    def param(self) -> bytes:
        """The encryption parameter (the IV)."""
        return self._param

    def algorithm(self) -> str:
        """The encryption algorithm (empty: the default, AES-256-GCM)."""
        return self._algorithm

    def compression_type(self) -> CompressionType:
        """The compression type of the message."""
        return self._compression

    def uncompressed_message_size(self) -> int:
        """The uncompressed message size, or 0 if the compression type is NONE."""
        return self._size

    def batch_size(self) -> int:
        """The number of messages in the batch, or -1 if the message is not batched."""
        return self._batch_size

    def is_decryption_failed(self) -> bool:
        """Whether decryption has failed for this message."""
        return self._failed

    def __str__(self) -> str:
        return (
            f"EncryptionContext(algorithm={self.algorithm()}, "
            f"compression_type={self.compression_type().name}, "
            f"uncompressed_message_size={self.uncompressed_message_size()}, "
            f"is_decryption_failed={self.is_decryption_failed()}, "
            f"keys=[{', '.join(str(key) for key in self.keys())}])"
        )

    def __repr__(self) -> str:
        return self.__str__()


def encryption_context(meta: pb.MessageMetadata, failed: bool) -> EncryptionContext:
    """The context of an encrypted message with metadata ``meta``."""
    compression = CompressionType(int(meta.compression))
    return EncryptionContext(
        (
            EncryptionKey(e.key, e.value, {kv.key: kv.value for kv in e.metadata})
            for e in meta.encryption_keys
        ),
        meta.encryption_param,
        meta.encryption_algo,
        compression,
        meta.uncompressed_size if compression != CompressionType.NONE else 0,
        meta.num_messages_in_batch if meta.HasField("num_messages_in_batch") else -1,
        failed,
    )


def make_encryptor(key: Any, reader: Any) -> MessageEncryptor | None:
    """A producer's encryptor for ``encryption_key`` (a name or a list of names) and
    ``crypto_key_reader``, or None when encryption is off (either is missing)."""
    if not key or reader is None:
        return None
    names = [key] if isinstance(key, str) else list(key)
    return MessageEncryptor(names, reader)


def failure_action(value: Any) -> ConsumerCryptoFailureAction:
    """The ``crypto_failure_action`` argument, checked as the official client does."""
    if not isinstance(value, ConsumerCryptoFailureAction):
        raise ValueError(
            "Argument crypto_failure_action is expected to be of type "
            f"'ConsumerCryptoFailureAction' and not '{type(value).__name__}'"
        )
    return value
