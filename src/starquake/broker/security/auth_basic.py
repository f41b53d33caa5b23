"""Basic authentication (``AuthenticationProviderBasic``): users and passwords from an
htpasswd file.

``basicAuthConf`` names the file (a path, ``file:///path``, ``data:;base64,...`` or its content
in base64; when empty, Pulsar's system property ``pulsar.auth.basic.conf``, see
:func:`starquake.broker.config.load_config`); it is read once, at start. Each line is
``user:hash`` with a bcrypt (``$2y$``, ``$2b$``, ``$2a$``), Apache MD5 (``$apr1$``) or crypt
(DES, 13 characters) hash, as ``htpasswd -B``, ``-m`` and ``-d`` write them. Clients send
``user:password`` (CONNECT ``auth_data``, or HTTP ``Authorization: Basic
base64(user:password)``).

Checking a bcrypt hash takes hundreds of milliseconds of CPU, so checks run on a dedicated
worker thread (:data:`CHECK_WORKERS`), never on the event loop nor on the thread pool that
storage uses; at most :data:`MAX_WAITING_CHECKS` more wait for it, and attempts beyond that are
refused at once. The worker runs at a lower CPU priority than the event loop. A storm of wrong
passwords therefore costs at most one core and cannot starve other clients. Verdicts are
cached (bounded, keyed by a keyed hash of user and password, never the password itself), so a
client that reconnects, or a storm that repeats one wrong password, costs a single check.
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import hmac
import os
import threading
from concurrent.futures import ThreadPoolExecutor
from typing import ClassVar

from passlib.context import CryptContext

from starquake.broker.config import BrokerConfig, ConfigError
from starquake.broker.security.keys import read_setting
from starquake.broker.security.provider import (
    AuthenticationError,
    AuthResult,
    BoundedCache,
    Credentials,
)

CHECK_WORKERS = 1
MAX_WAITING_CHECKS = 16
CACHE_ENTRIES = 4096
WORKER_NICENESS = 10
_WRONG = "unknown user or wrong password"

_HASHES = CryptContext(schemes=["bcrypt", "apr_md5_crypt", "des_crypt"])


def parse_htpasswd(data: bytes) -> dict[str, str]:
    """``user -> hash`` of an htpasswd file; ConfigError for a line it cannot use."""
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError:
        raise ConfigError("basicAuthConf: the file is not UTF-8 text") from None
    users: dict[str, str] = {}
    for number, raw in enumerate(text.splitlines(), 1):
        line = raw.strip()
        if not line or line.startswith("#"):
            continue
        user, sep, hashed = line.partition(":")
        if not sep or not user or not hashed:
            raise ConfigError(f"basicAuthConf: line {number} is not user:hash")
        if _HASHES.identify(hashed) is None:
            raise ConfigError(
                f"basicAuthConf: line {number} (user {user!r}) has a hash that is not bcrypt, "
                "$apr1$ (MD5) or crypt (DES)"
            )
        users[user] = hashed
    return users


class BasicAuthenticationProvider:
    """Checks ``user:password`` against the htpasswd file of ``basicAuthConf``."""

    method: ClassVar[str] = "basic"

    def __init__(self, config: BrokerConfig) -> None:
        if not config.basicAuthConf:
            raise ConfigError(
                "basic authentication needs an htpasswd file: set basicAuthConf, or "
                "-Dpulsar.auth.basic.conf=... in PULSAR_EXTRA_OPTS"
            )
        self.users = parse_htpasswd(read_setting("basicAuthConf", config.basicAuthConf))
        self._executor: ThreadPoolExecutor | None = None
        self._checks = 0
        self._cache_key = os.urandom(32)
        self._verdicts: BoundedCache[bytes, bool] = BoundedCache(CACHE_ENTRIES)

    async def authenticate(self, credentials: Credentials) -> AuthResult:
        """The role of ``user:password`` credentials checked against the users file."""
        user, sep, password = credentials.data.decode("utf-8", "replace").partition(":")
        if not sep or not user:
            raise AuthenticationError("basic credentials must be user:password")
        hashed = self.users.get(user)
        if hashed is None:
            raise AuthenticationError(_WRONG)
        key = hmac.new(self._cache_key, credentials.data, hashlib.sha256).digest()
        verdict = self._verdicts.get(key)
        if verdict is None:
            verdict = await self._check(password, hashed)
            self._verdicts.put(key, verdict)
        if not verdict:
            raise AuthenticationError(_WRONG)
        return AuthResult(user, self.method)

    async def _check(self, password: str, hashed: str) -> bool:
        if self._checks >= CHECK_WORKERS + MAX_WAITING_CHECKS:
            raise AuthenticationError("too many password checks in progress; try again later")
        if self._executor is None:
            self._executor = ThreadPoolExecutor(
                CHECK_WORKERS, thread_name_prefix="starquake-auth", initializer=_lower_priority
            )
        self._checks += 1
        try:
            loop = asyncio.get_running_loop()
            return await loop.run_in_executor(self._executor, _verify, password, hashed)
        finally:
            self._checks -= 1

    @property
    def checks_in_progress(self) -> int:
        """Password checks running or waiting for the worker."""
        return self._checks

    def close(self) -> None:
        """Stop the password-checking thread."""
        if self._executor is not None:
            self._executor.shutdown(wait=False, cancel_futures=True)
            self._executor = None


def _lower_priority() -> None:
    """Run this worker thread at a lower CPU priority than the event loop (Linux: the nice
    value is per thread), so that password checks yield to serving clients."""
    # not Linux, or not allowed: normal priority
    with contextlib.suppress(AttributeError, OSError):
        os.setpriority(os.PRIO_PROCESS, threading.get_native_id(), WORKER_NICENESS)


def _verify(password: str, hashed: str) -> bool:
    try:
        return bool(_HASHES.verify(password, hashed))
    except ValueError:  # e.g. a password bcrypt cannot take
        return False
