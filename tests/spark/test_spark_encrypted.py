"""Batch reads of a topic encrypted end to end: decrypted with ``pulsar.reader.privateKeyPath``,
refused without it, or read as stored with ``pulsar.reader.cryptoFailureAction=CONSUME``; and
writes encrypted with ``pulsar.producer.encryptionKeys`` and ``defaultCryptoKeyReader``."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pulsar
import pytest
from conftest import SparkBroker
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import rsa
from spark_helpers import load


def _rsa_pair(directory: Path) -> tuple[str, str]:
    """(public, private) PEM files of a new 2048-bit RSA key."""
    key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    public, private = directory / "spark.pub.pem", directory / "spark.key.pem"
    public.write_bytes(
        key.public_key().public_bytes(
            serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo
        )
    )
    private.write_bytes(
        key.private_bytes(
            serialization.Encoding.PEM,
            serialization.PrivateFormat.PKCS8,
            serialization.NoEncryption(),
        )
    )
    return str(public), str(private)


def test_encrypted_topic(
    spark: Any, spark_broker: SparkBroker, new_topic: str, tmp_path: Path
) -> None:
    public, private = _rsa_pair(tmp_path)
    client = pulsar.Client(spark_broker.url, logger=pulsar.ConsoleLogger(pulsar.LoggerLevel.Error))
    try:
        producer = client.create_producer(
            new_topic,
            encryption_key="spark-key",
            crypto_key_reader=pulsar.CryptoKeyReader(public, private),
            batching_enabled=True,
            batching_max_publish_delay_ms=60_000,
        )
        for i in range(5):
            producer.send_async(f"secret-{i}".encode(), None)
        producer.flush()  # one batch of five
        # and a single message, flushed at once (a send() waits for the batch's 60 s delay)
        producer.send_async(b"secret-5", None)
        producer.flush()
    finally:
        client.close()
    rows = load(spark, spark_broker, topic=new_topic, **{"pulsar.reader.privateKeyPath": private})
    assert sorted(r.value for r in rows.collect()) == [f"secret-{i}".encode() for i in range(6)]
    with pytest.raises(Exception, match="give the reader a crypto_key_reader"):
        load(spark, spark_broker, topic=new_topic).collect()
    stored = load(
        spark, spark_broker, topic=new_topic, **{"pulsar.reader.cryptoFailureAction": "CONSUME"}
    ).collect()
    assert len(stored) == 2  # the batch as one row, and the single message
    assert all(b"secret" not in r.value for r in stored)


def test_the_sink_encrypts_with_the_producer_options(
    spark: Any, spark_broker: SparkBroker, new_topic: str, tmp_path: Path
) -> None:
    public, private = _rsa_pair(tmp_path)
    df = spark.range(40).selectExpr(
        "concat('secret-', cast(id as string)) as value", "map('n', cast(id as string)) as m"
    )
    writer = (
        df.selectExpr("value", "m as __messageProperties").repartition(2).write.format("pulsar")
    )
    options = spark_broker.options(
        topic=new_topic,
        writeId="encrypted",
        **{
            "pulsar.producer.encryptionKeys": "spark-key",
            "pulsar.producer.defaultCryptoKeyReader": f"file://{public}",
        },
    )
    for key, value in options.items():
        writer = writer.option(key, value)
    writer.mode("append").save()
    want = sorted(f"secret-{i}".encode() for i in range(40))
    # the official client opens them with the private key
    client = pulsar.Client(spark_broker.url, logger=pulsar.ConsoleLogger(pulsar.LoggerLevel.Error))
    try:
        reader = client.create_reader(
            new_topic,
            pulsar.MessageId.earliest,
            crypto_key_reader=pulsar.CryptoKeyReader(public, private),
        )
        seen = []
        while reader.has_message_available():
            msg = reader.read_next(5000)
            assert msg.properties() == {"n": msg.data().decode().removeprefix("secret-")}
            seen.append(msg.data())
        assert sorted(seen) == want
    finally:
        client.close()
    # so does the source; stored, the payloads are ciphertext
    rows = load(spark, spark_broker, topic=new_topic, **{"pulsar.reader.privateKeyPath": private})
    assert sorted(r.value for r in rows.collect()) == want
    stored = load(
        spark, spark_broker, topic=new_topic, **{"pulsar.reader.cryptoFailureAction": "CONSUME"}
    ).collect()
    assert stored and all(b"secret" not in r.value for r in stored)
