"""Batch reads of a topic encrypted end to end: decrypted with ``pulsar.reader.privateKeyPath``,
refused without it, or read as stored with ``pulsar.reader.cryptoFailureAction=CONSUME``."""

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
