"""Fixtures of the security tests: one set of test certificates, and one broker with TLS ports
(plaintext ports on too), per module."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from tls_certs import Pki, make_pki
from tls_setup import tls_broker

from starquake.broker.embedded import EmbeddedBroker


@pytest.fixture(scope="module")
def pki(tmp_path_factory: pytest.TempPathFactory) -> Pki:
    return make_pki(tmp_path_factory.mktemp("pki"))


@pytest.fixture(scope="module")
def tls(tmp_path_factory: pytest.TempPathFactory, pki: Pki) -> Iterator[EmbeddedBroker]:
    with tls_broker(tmp_path_factory.mktemp("tls") / "data", pki) as running:
        yield running
