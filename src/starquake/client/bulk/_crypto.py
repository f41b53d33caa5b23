"""Decryption of the entries a bulk reader reads, with the official reader's failure actions."""

from __future__ import annotations

import logging

from starquake.client.base._enums import ConsumerCryptoFailureAction
from starquake.client.base._logging import CLIENT_LOGGER_NAME
from starquake.client.crypto._crypto import CryptoKeyReader, MessageDecryptor
from starquake.client.exceptions import CryptoError
from starquake.protocol.wire import pb

log = logging.getLogger(CLIENT_LOGGER_NAME)

_FAIL = ConsumerCryptoFailureAction.FAIL
_DISCARD = ConsumerCryptoFailureAction.DISCARD
_CONSUME = ConsumerCryptoFailureAction.CONSUME


def is_chunk(meta: pb.MessageMetadata) -> bool:
    """Whether the entry is one chunk of a chunked message."""
    return meta.num_chunks_from_msg > 1 and not meta.HasField("num_messages_in_batch")


class EntryDecryption:
    """Opens the entries of one topic encrypted end to end, or says what to do with one that
    does not open: raise :class:`CryptoError` (FAIL), or let the caller skip it (DISCARD) or
    hand it out as stored (CONSUME; not for a chunk, whose parts are encrypted one by one)."""

    def __init__(
        self,
        topic: str,
        key_reader: CryptoKeyReader | None = None,
        action: ConsumerCryptoFailureAction = _FAIL,
    ) -> None:
        self.topic = topic
        self.decryptor = MessageDecryptor(key_reader) if key_reader is not None else None
        self.action = ConsumerCryptoFailureAction(action)
        self._warned = False

    def open(
        self, where: str, meta: pb.MessageMetadata, payload: bytes | memoryview
    ) -> bytes | None:
        """The plaintext of the entry at ``where``, or None when it does not open and the
        failure action lets it through."""
        plain = self.decryptor.decrypt(meta, payload) if self.decryptor is not None else None
        if plain is not None:
            return plain
        chunk = is_chunk(meta)
        if self.action == _DISCARD or (self.action == _CONSUME and not chunk):
            if not self._warned:
                self._warned = True
                verb = "skipping" if self.action == _DISCARD else "reading still encrypted"
                log.warning("%s: %s the messages it cannot decrypt", self.topic, verb)
            return None
        what = f"{self.topic}: entry {where} is encrypted end to end"
        if chunk and self.action == _CONSUME:
            raise CryptoError(f"{what}; a chunked message cannot be read still encrypted")
        if self.decryptor is None:
            raise CryptoError(f"{what}; give the reader a crypto_key_reader to read it")
        names = ", ".join(k.key for k in meta.encryption_keys)
        raise CryptoError(f"{what}, and no private key of the key reader opens it ({names})")


__all__ = ["EntryDecryption", "is_chunk"]
