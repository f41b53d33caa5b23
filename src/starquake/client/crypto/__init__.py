"""End-to-end encryption of message payloads and the wrapping of their data keys.

Private: :mod:`starquake.client` re-exports ``CryptoKeyReader``, ``EncryptionKey`` and
``EncryptionContext``.
"""
