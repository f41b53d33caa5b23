"""Basic authentication (``AuthenticationProviderBasic``): users and passwords from an
htpasswd file.

``basicAuthConf`` names the file (a path, ``file:///path``, ``data:;base64,...`` or its content
in base64; when empty, Pulsar's system property ``pulsar.auth.basic.conf``, see
:func:`starquake.broker.config.load_config`); it is read once, at start. Each line is
``user:hash`` with a bcrypt (``$2y$``, ``$2b$``, ``$2a$``), Apache MD5 (``$apr1$``) or crypt
(DES, 13 characters) hash, as ``htpasswd -B``, ``-m`` and ``-d`` write them. Clients send
``user:password`` (CONNECT ``auth_data``, or HTTP ``Authorization: Basic
base64(user:password)``).

Checking a bcrypt hash takes hundreds of milliseconds of CPU, so checks are scheduled fairly
on one worker thread with per-user and per-address limits and a CPU budget
(``passwordCheckCpuPercent`` of one core; :mod:`starquake.broker.security.password_checks`): a
storm of wrong passwords costs at most that and cannot starve other users' logins.

Verdicts are cached, keyed by a keyed hash of ``user:password`` (never the password itself), in
two bounded caches: accepted credentials, which only a successful check adds to (so no number of
wrong attempts evicts a good login), and refused ones (a storm that repeats a wrong password
costs a single check). A check that has run is cached even if its client gave up waiting (its
retry needs none). A cached login is accepted without a check, even while a storm holds
every check place of its user.

A user name that is not in the file costs the same as a known one: its password is checked
against the slowest hash in the file (and refused whatever the outcome), so that the time of a
refusal does not tell which user names exist.
"""

from __future__ import annotations

import hashlib
import hmac
import os
from collections.abc import Iterable
from typing import ClassVar

from passlib.context import CryptContext

from starquake.broker.config import BrokerConfig, ConfigError
from starquake.broker.security.keys import read_setting
from starquake.broker.security.password_checks import PasswordChecks
from starquake.broker.security.provider import (
    AuthenticationError,
    AuthResult,
    BoundedCache,
    Credentials,
)

CACHE_ENTRIES = 4096
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
        self.decoy = slowest_hash(self.users.values())
        """The hash unknown users' passwords are checked against (None: the file is empty)."""
        self.checks = PasswordChecks(_verify, config.passwordCheckCpuPercent / 100)
        self.unknown_user_checks = 0
        """Checks made for user names that are not in the file."""
        self._cache_key = os.urandom(32)
        self._accepted: BoundedCache[bytes, bool] = BoundedCache(CACHE_ENTRIES)
        self._refused: BoundedCache[bytes, bool] = BoundedCache(CACHE_ENTRIES)

    async def authenticate(self, credentials: Credentials) -> AuthResult:
        """The role of ``user:password`` credentials checked against the users file."""
        user, sep, password = credentials.data.decode("utf-8", "replace").partition(":")
        if not sep or not user:
            raise AuthenticationError("basic credentials must be user:password")
        key = hmac.new(self._cache_key, credentials.data, hashlib.sha256).digest()
        if self._accepted.get(key):
            return AuthResult(user, self.method)
        if self._refused.get(key):
            raise AuthenticationError(_WRONG)

        def remember(verdict: bool) -> None:
            (self._accepted if verdict else self._refused).put(key, True)

        hashed = self.users.get(user)
        if hashed is None:
            if self.decoy is not None:
                self.unknown_user_checks += 1
                await self.checks.check(
                    credentials.source, user, password, self.decoy, lambda _: remember(False)
                )
            verdict = False
        else:
            verdict = await self.checks.check(
                credentials.source, user, password, hashed, on_verdict=remember
            )
        if not verdict:
            raise AuthenticationError(_WRONG)
        return AuthResult(user, self.method)

    def close(self) -> None:
        """Stop the password-checking thread."""
        self.checks.close()


def slowest_hash(hashes: Iterable[str]) -> str | None:
    """The hash of ``hashes`` that is slowest to check: bcrypt of the highest cost, else
    ``$apr1$`` (MD5, 1000 rounds), else crypt (DES)."""

    def cost(hashed: str) -> int:
        if hashed.startswith("$2"):
            rounds = hashed.split("$")[2]
            return 1 << int(rounds) if rounds.isdigit() else 0
        return 2 if hashed.startswith("$apr1$") else 1

    return max(hashes, key=cost, default=None)


def _verify(password: str, hashed: str) -> bool:
    try:
        return bool(_HASHES.verify(password, hashed))
    except ValueError:  # e.g. a password bcrypt cannot take
        return False
