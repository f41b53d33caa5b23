"""End-to-end encryption with EC (ECDSA) keys: data keys wrapped with ECIES as Pulsar's Java
client does it (Bouncy Castle's ``ECIES`` cipher). Known answers made by Bouncy Castle 1.72 pin
the construction; round trips through a real broker cover single, batched and chunked
messages; the official Python client, which reads RSA keys only, gets the ciphertext."""

from __future__ import annotations

import os
import uuid
from typing import Any

import pulsar
import pytest
from crypto_keys import KeyPair
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import ec, rsa
from cryptography.hazmat.primitives.ciphers.aead import AESGCM
from hypothesis import given
from hypothesis import strategies as st
from official_client import make_client

import starquake.client as sq
from starquake.broker.embedded import EmbeddedBroker
from starquake.client.crypto._key_wrap import load_private, load_public, unwrap, wrap

# A P-256 key as `openssl ecparam -name prime256v1 -genkey -noout` writes it.
P256_PEM = b"""-----BEGIN EC PRIVATE KEY-----
MHcCAQEEIFaYzAQLTMVfs/pgjUDt1sawGJ8O63/It5V6s0LoVNRYoAoGCCqGSM49
AwEHoUQDQgAEtDnrcDJs9l+PBtEcsw8DBAdSmgJs1RnOqDtVpKPxYzLlxncGkKH9
+/yFZnA0LQD5JlEUQ/wyStmwyLJkz9Dwlw==
-----END EC PRIVATE KEY-----
"""
# A P-384 key with explicit curve parameters, as `openssl ecparam -genkey -param_enc explicit`
# writes it (the form Pulsar's documentation shows for ECDSA keys).
P384_EXPLICIT_PEM = b"""-----BEGIN EC PARAMETERS-----
MIIBVwIBATA8BgcqhkjOPQEBAjEA////////////////////////////////////
//////7/////AAAAAAAAAAD/////MHsEMP//////////////////////////////
///////////+/////wAAAAAAAAAA/////AQwszEvp+I+5+SYjgVr4/gtGRgdnG7+
gUESAxQIj1ATh1rGVjmNii7RnSqFyO3T7CrvAxUAozWSaqMZonodAIlqZ3OkgnrN
rHMEYQSqh8oivosFN46xxx7zIK10bh07Younm5hZ90HgglQqOFUC8l2/VSlsOlRe
OHJ2Crc2F95KliYsb12emL+Sktwp+PQdvSiaFHzp2jETtfC4wApgsc4dfoGdekMd
fJDqDl8CMQD////////////////////////////////HY02B9Dct31gaDbJIsKd6
7OwZaszFKXMCAQE=
-----END EC PARAMETERS-----
-----BEGIN EC PRIVATE KEY-----
MIIB+gIBAQQwcCsBkFihiaxSGMku7MpF+I4UNCD4jw3ot9VaOVulfJ10T+ZRBgpQ
xO24QIMK6dRjoIIBWzCCAVcCAQEwPAYHKoZIzj0BAQIxAP//////////////////
///////////////////////+/////wAAAAAAAAAA/////zB7BDD/////////////
/////////////////////////////v////8AAAAAAAAAAP////wEMLMxL6fiPufk
mI4Fa+P4LRkYHZxu/oFBEgMUCI9QE4daxlY5jYou0Z0qhcjt0+wq7wMVAKM1kmqj
GaJ6HQCJamdzpIJ6zaxzBGEEqofKIr6LBTeOscce8yCtdG4dO2KLp5uYWfdB4IJU
KjhVAvJdv1UpbDpUXjhydgq3NhfeSpYmLG9dnpi/kpLcKfj0Hb0omhR86doxE7Xw
uMAKYLHOHX6BnXpDHXyQ6g5fAjEA////////////////////////////////x2NN
gfQ3Ld9YGg2ySLCneuzsGWrMxSlzAgEBoWQDYgAE8lLALGodlEJmsHRWBp2+xMf7
TN76DjyHeWaoVXwIn2fukdwFidUPt7KDA5azZsgKcdAda77bjykNmB46Ni3MXPVa
iJ1F+qQUETlrbL+cPIykPGh71dRTDhKnjj9QyEHb
-----END EC PRIVATE KEY-----
"""
DATA_KEY = bytes.fromhex("6b6579206f66207468697274792074776f206279746573206578616374c3a921")
# What Bouncy Castle 1.72's Cipher.getInstance("ECIES", "BC") made of DATA_KEY for each key.
BC_WRAPPED = {
    "p256": "0407fe84d2932a61fdf8615ad8aaba2d15bb6879200daa769923030bff6a08ea382fc6118c5ea5"
    "cfeb74fde8550531d9f46ab6d5470383cb7bd9eceb5b0ba9015d796b56ec8ea2ae24b80662e12385"
    "0290cf6a52df90d190a6794eb46c24ae346ea5f5626a9b223621669826219ef805f786b1c2e5",
    "p384": "04ba48c2053d75348ccfca5c23f80bdfcc4297197101a734dc8f95e6cc4ada07b2d9ecb2fc65cb"
    "a19e6625a748feeec815bbed19c5d38d1dc7c2ef8a6a3f3474adeba77e429f171ee73a11178c8924"
    "678b73d849f67436497c9d6e438846849e08421fb13a220c233b3ade60b7325683247b0d8a39e6b9"
    "cc1f25295fc02f20f8702f401b1f72e4f33e20d26615444a737dfee13433",
}
PEMS = {"p256": P256_PEM, "p384": P384_EXPLICIT_PEM}
PLAIN = b"ec-secret-"


@pytest.mark.parametrize("name", sorted(BC_WRAPPED))
def test_unwraps_what_bouncy_castle_wrapped(name: str) -> None:
    key = load_private(PEMS[name], name)
    assert unwrap(key, bytes.fromhex(BC_WRAPPED[name])) == DATA_KEY


@pytest.mark.parametrize("name", sorted(BC_WRAPPED))
def test_a_changed_byte_or_another_key_does_not_unwrap(name: str) -> None:
    key = load_private(PEMS[name], name)
    wrapped = bytearray(bytes.fromhex(BC_WRAPPED[name]))
    for index in (len(wrapped) - 1, len(wrapped) - 30, 70):  # tag, ciphertext, point
        changed = bytearray(wrapped)
        changed[index] ^= 1
        with pytest.raises(ValueError):
            unwrap(key, bytes(changed))
    other = ec.generate_private_key(key.curve)  # type: ignore[union-attr]
    with pytest.raises(ValueError):
        unwrap(other, bytes(wrapped))
    with pytest.raises(ValueError):
        unwrap(key, bytes(wrapped[:40]))


KEYS = {
    "p256": ec.generate_private_key(ec.SECP256R1()),
    "p384": ec.generate_private_key(ec.SECP384R1()),
    "p521": ec.generate_private_key(ec.SECP521R1()),
    "rsa": rsa.generate_private_key(public_exponent=65537, key_size=2048),
}


@given(name=st.sampled_from(sorted(KEYS)), data=st.binary(min_size=0, max_size=64))
def test_wrap_then_unwrap_gives_the_data_back(name: str, data: bytes) -> None:
    key = KEYS[name]
    wrapped = wrap(key.public_key(), data)  # type: ignore[arg-type]
    assert unwrap(key, wrapped) == data  # type: ignore[arg-type]
    # a fresh ephemeral key (EC) or padding (RSA) each time: never the same bytes twice
    assert wrap(key.public_key(), data) != wrapped  # type: ignore[arg-type]


def test_keys_of_other_kinds_are_refused() -> None:
    from cryptography.hazmat.primitives.asymmetric import ed25519

    key = ed25519.Ed25519PrivateKey.generate()
    pem = key.private_bytes(
        serialization.Encoding.PEM,
        serialization.PrivateFormat.PKCS8,
        serialization.NoEncryption(),
    )
    pub = key.public_key().public_bytes(
        serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo
    )
    with pytest.raises(sq.CryptoError, match="neither an RSA nor an EC key"):
        load_private(pem, "ed")
    with pytest.raises(sq.CryptoError, match="neither an RSA nor an EC key"):
        load_public(pub, "ed")
    with pytest.raises(sq.CryptoError, match="cannot load"):
        load_public(b"not a key", "junk")


# --- through a broker ---------------------------------------------------------------------


@pytest.fixture(scope="module")
def ec_keys(tmp_path_factory: pytest.TempPathFactory) -> KeyPair:
    """The explicit-parameter P-384 pair, as files."""
    directory = tmp_path_factory.mktemp("ec")
    private = directory / "ec.key.pem"
    private.write_bytes(P384_EXPLICIT_PEM)
    public = directory / "ec.pub.pem"
    key = load_private(P384_EXPLICIT_PEM, "ec")
    public.write_bytes(
        key.public_key().public_bytes(
            serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo
        )
    )
    return KeyPair(str(public), str(private))


def _topic() -> str:
    return f"persistent://public/default/ec-{uuid.uuid4().hex[:12]}"


@pytest.mark.parametrize("mode", ["single", "batched", "chunked"])
def test_our_clients_encrypt_and_decrypt_with_ec_keys(
    small_broker: EmbeddedBroker, ec_keys: KeyPair, mode: str
) -> None:
    client = make_client(sq, small_broker)
    try:
        topic = _topic()
        reader = sq.CryptoKeyReader(ec_keys.public, ec_keys.private)
        consumer = client.subscribe(topic, "s", crypto_key_reader=reader)
        producer = client.create_producer(
            topic,
            encryption_key="ec-key",
            crypto_key_reader=reader,
            batching_enabled=mode == "batched",
            chunking_enabled=mode == "chunked",
        )
        size = 30_000 if mode == "chunked" else 10
        payloads = [PLAIN + os.urandom(size) for _ in range(3)]
        for payload in payloads:
            producer.send_async(payload, None)
        producer.flush()
        got = []
        for _ in payloads:
            msg = consumer.receive(5000)
            got.append(msg.data())
            context = msg.encryption_context()
            assert context is not None and context.keys()[0].key == "ec-key"
            consumer.acknowledge(msg)
        assert got == payloads
        producer.close()
        consumer.close()
    finally:
        client.close()


def test_the_official_client_gets_the_ciphertext_of_ec_wrapped_messages(
    broker: EmbeddedBroker, ec_keys: KeyPair
) -> None:
    """It cannot read EC keys: with CONSUME it delivers the payload still encrypted, and the
    encryption context (the ECIES-wrapped key, the IV) opens it."""
    ours, official = make_client(sq, broker), make_client(pulsar, broker)
    try:
        topic = _topic()
        consumer = official.subscribe(
            topic,
            "s",
            crypto_key_reader=pulsar.CryptoKeyReader(ec_keys.public, ec_keys.private),
            crypto_failure_action=pulsar.ConsumerCryptoFailureAction.CONSUME,
        )
        producer = ours.create_producer(
            topic,
            encryption_key="ec-key",
            crypto_key_reader=sq.CryptoKeyReader(ec_keys.public, ec_keys.private),
            batching_enabled=False,
        )
        producer.send(PLAIN + b"1")
        msg = consumer.receive(5000)
        assert msg.data() != PLAIN + b"1"
        context: Any = msg.encryption_context()
        assert context is not None and context.is_decryption_failed()
        key = load_private(P384_EXPLICIT_PEM, "ec")
        data_key = unwrap(key, context.keys()[0].value)
        assert AESGCM(data_key).decrypt(context.param(), msg.data(), None) == PLAIN + b"1"
        consumer.acknowledge(msg)
    finally:
        ours.close()
        official.close()
