"""Token authentication (``AuthenticationProviderToken``): JSON Web Tokens.

A token is signed with the HMAC key of ``tokenSecretKey`` (HS256, HS384, HS512) or, when no
secret key is set, with the private key whose public half is ``tokenPublicKey``
(``tokenPublicAlg``: RS256 ... ES512). The role is the ``tokenAuthClaim`` claim (``sub``); an
``exp`` claim makes the token, and the connection that used it, expire; ``nbf`` is honoured.
With ``tokenAudience`` set, the ``tokenAudienceClaim`` claim (``aud``) must be or contain it.

Verdicts are cached by the token's SHA-256 (bounded), so a client that reconnects, or a storm
repeating one bad token, costs one signature check. Verification is fast (tens of
microseconds) and runs on the event loop.
"""

from __future__ import annotations

import hashlib
import time
from typing import Any, ClassVar

import jwt

from starquake.broker.config import BrokerConfig, ConfigError
from starquake.broker.security import keys
from starquake.broker.security.provider import (
    AuthenticationError,
    AuthResult,
    BoundedCache,
    Credentials,
)

HMAC_ALGORITHMS = ("HS256", "HS384", "HS512")
MAX_TOKEN_BYTES = 64 * 1024
CACHE_ENTRIES = 8192
_BEARER = "Bearer "

# A cached verdict: (role, expiry or None) for a good token, the refusal's reason for a bad one.
_Verdict = tuple[str, float | None] | str
# Not cached: it becomes valid later.
_NOT_YET_VALID = "token not yet valid (nbf)"


class TokenAuthenticationProvider:
    """Verifies JWTs with the broker's secret or public key."""

    method: ClassVar[str] = "token"

    def __init__(self, config: BrokerConfig) -> None:
        self._key: Any
        if config.tokenSecretKey:
            self._key = keys.secret_key(config.tokenSecretKey)
            self._algorithms: list[str] = list(HMAC_ALGORITHMS)
        elif config.tokenPublicKey:
            self._key = keys.public_key(config.tokenPublicKey, config.tokenPublicAlg)
            self._algorithms = [config.tokenPublicAlg]
        else:
            raise ConfigError(
                "token authentication needs tokenSecretKey or tokenPublicKey "
                "(create keys with: starquake tokens create-secret-key | create-key-pair)"
            )
        self._role_claim = config.tokenAuthClaim or "sub"
        self._audience_claim = config.tokenAudienceClaim or "aud"
        self._audience = config.tokenAudience or None
        self._skew = config.tokenAllowedClockSkewSeconds
        self._verdicts: BoundedCache[bytes, _Verdict] = BoundedCache(CACHE_ENTRIES)

    async def authenticate(self, credentials: Credentials) -> AuthResult:
        """The role of a JSON Web Token (its ``sub`` claim)."""
        return self.verify(credentials.data)

    def verify(self, data: bytes, now: float | None = None) -> AuthResult:
        """The role of the token ``data`` (a ``Bearer`` prefix is allowed)."""
        if len(data) > MAX_TOKEN_BYTES:
            raise AuthenticationError("token too long")
        try:
            token = data.decode("ascii").strip()
        except UnicodeDecodeError:
            raise AuthenticationError("malformed token") from None
        if token.startswith(_BEARER):
            token = token[len(_BEARER) :].strip()
        if not token:
            raise AuthenticationError("no token given")
        digest = hashlib.sha256(token.encode()).digest()
        verdict = self._verdicts.get(digest)
        if verdict is None:
            verdict = self._check(token)
            if verdict is not _NOT_YET_VALID:
                self._verdicts.put(digest, verdict)
        if isinstance(verdict, str):
            raise AuthenticationError(verdict)
        role, expires_at = verdict
        if expires_at is not None and expires_at <= (time.time() if now is None else now):
            raise AuthenticationError("token expired")
        return AuthResult(role, self.method, expires_at)

    def _check(self, token: str) -> _Verdict:
        try:
            claims = jwt.decode(
                token,
                self._key,
                algorithms=self._algorithms,
                options={"verify_aud": False, "verify_exp": False, "verify_iat": False},
                leeway=self._skew,
            )
        except jwt.ImmatureSignatureError:
            return _NOT_YET_VALID
        except jwt.InvalidSignatureError:
            return "invalid token signature"
        except jwt.InvalidAlgorithmError:
            return f"token algorithm not accepted (accepted: {', '.join(self._algorithms)})"
        except jwt.InvalidTokenError as exc:
            return f"invalid token ({exc})"
        role = claims.get(self._role_claim)
        if not isinstance(role, str) or not role:
            return f"token has no {self._role_claim!r} claim"
        if self._audience is not None:
            audience = claims.get(self._audience_claim)
            audiences = audience if isinstance(audience, list) else [audience]
            if self._audience not in audiences:
                return f"token audience does not include {self._audience!r}"
        exp = claims.get("exp")
        if exp is not None and not isinstance(exp, int | float):
            return "invalid token (exp is not a number)"
        # tokenAllowedClockSkewSeconds: honoured until that long after exp (and before nbf)
        return role, None if exp is None else float(exp) + self._skew

    def close(self) -> None:
        """Nothing to release."""
