"""``starquake tokens``: keys and JSON Web Tokens for token authentication, as ``pulsar tokens``.

- ``create-secret-key [-a HS256] [-o FILE] [-b]``: a random HMAC key, as raw bytes (the form
  ``tokenSecretKey=file:///...`` reads), or base64 text with ``--base64``.
- ``create-key-pair [-a RS256|ES256] --output-private-key F --output-public-key F``: a key pair,
  DER-encoded (PKCS#8 private key, X.509 public key), as Pulsar writes them.
- ``create (--secret-key KEY | --private-key KEY) --subject ROLE [--expiry-time 1d]
  [--headers k=v]``: a signed token; KEY is ``file:///path``, ``data:;base64,...``, a path or
  base64 text.
- ``show TOKEN`` prints its header and claims (without checking it); ``validate TOKEN
  (--secret-key KEY | --public-key KEY)`` checks its signature and expiry, then prints its claims.

PyJWT and cryptography are imported by the commands themselves, so that other commands do not
pay for them.
"""

from __future__ import annotations

import base64
import binascii
import json
import os
import sys
import time
from pathlib import Path
from typing import Any

import click

from starquake.cli.output import CommandError
from starquake.cli.params import key_values, relative_seconds

_SECRET_BYTES = {"HS256": 32, "HS384": 48, "HS512": 64}
_KEY_PAIR_ALGORITHMS = ("RS256", "RS384", "RS512", "ES256", "ES384", "ES512")
_RSA_BITS = 2048


@click.group("tokens")
def tokens() -> None:
    """Create keys and tokens for token authentication (as pulsar tokens)."""


@tokens.command("create-secret-key")
@click.option(
    "-a",
    "--signature-algorithm",
    type=click.Choice(sorted(_SECRET_BYTES)),
    default="HS256",
    show_default=True,
    help="the HMAC algorithm the key is for (sets its length)",
)
@click.option("-o", "--output", "output", default=None, help="write the key to this file")
@click.option("-b", "--base64", "as_base64", is_flag=True, help="encode the key in base64")
def create_secret_key(signature_algorithm: str, output: str | None, as_base64: bool) -> None:
    """Create a random secret key (tokenSecretKey)."""
    key = os.urandom(_SECRET_BYTES[signature_algorithm])
    data = base64.b64encode(key) if as_base64 else key
    if output is None:
        sys.stdout.buffer.write(data)
        sys.stdout.buffer.flush()
    else:
        _write_private(output, data)


@tokens.command("create-key-pair")
@click.option(
    "-a",
    "--signature-algorithm",
    type=click.Choice(_KEY_PAIR_ALGORITHMS),
    default="RS256",
    show_default=True,
    help="the algorithm the keys are for (RS*: RSA, ES*: elliptic curve)",
)
@click.option("--output-private-key", required=True, help="file to write the private key to")
@click.option("--output-public-key", required=True, help="file to write the public key to")
def create_key_pair(
    signature_algorithm: str, output_private_key: str, output_public_key: str
) -> None:
    """Create a private/public key pair (the public key is tokenPublicKey)."""
    from cryptography.hazmat.primitives import serialization
    from cryptography.hazmat.primitives.asymmetric import ec, rsa

    private_key: rsa.RSAPrivateKey | ec.EllipticCurvePrivateKey
    if signature_algorithm.startswith("RS"):
        private_key = rsa.generate_private_key(public_exponent=65537, key_size=_RSA_BITS)
    else:
        curves: dict[str, ec.EllipticCurve] = {
            "ES256": ec.SECP256R1(),
            "ES384": ec.SECP384R1(),
            "ES512": ec.SECP521R1(),
        }
        private_key = ec.generate_private_key(curves[signature_algorithm])
    private_der = private_key.private_bytes(
        serialization.Encoding.DER,
        serialization.PrivateFormat.PKCS8,
        serialization.NoEncryption(),
    )
    public_der = private_key.public_key().public_bytes(
        serialization.Encoding.DER, serialization.PublicFormat.SubjectPublicKeyInfo
    )
    _write_private(output_private_key, private_der)
    Path(output_public_key).write_bytes(public_der)


@tokens.command("create")
@click.option(
    "-s", "--subject", required=True, help="the role (principal) the token is for ('sub' claim)"
)
@click.option(
    "-e",
    "--expiry-time",
    default=None,
    help="expires after this long (e.g. 30m, 2h, 1d, 1y; default: never)",
)
@click.option("-sk", "--secret-key", default=None, help="sign with this secret key (HS256...)")
@click.option("-pk", "--private-key", default=None, help="sign with this private key (RS256...)")
@click.option(
    "-a",
    "--signature-algorithm",
    type=click.Choice(_KEY_PAIR_ALGORITHMS),
    default=None,
    help="the algorithm of --private-key (default: RS256, or ES* for an EC key)",
)
@click.option(
    "-hs",
    "--headers",
    multiple=True,
    help="an extra header field, KEY=VALUE (repeatable, or comma-separated)",
)
def create(
    subject: str,
    expiry_time: str | None,
    secret_key: str | None,
    private_key: str | None,
    signature_algorithm: str | None,
    headers: tuple[str, ...],
) -> None:
    """Create a token signed with a secret or private key."""
    import jwt

    if (secret_key is None) == (private_key is None):
        raise click.UsageError("give one of --secret-key and --private-key")
    claims: dict[str, Any] = {"sub": subject}
    if expiry_time is not None:
        claims["exp"] = int(time.time()) + _seconds(expiry_time)
    key: Any
    if secret_key is not None:
        key = _key_bytes(secret_key, "--secret-key")
        algorithm = _hmac_algorithm(len(key))
    else:
        assert private_key is not None
        key, algorithm = _private_key(_key_bytes(private_key, "--private-key"), signature_algorithm)
    extra_headers = key_values(headers, "--headers") or None
    token = jwt.encode(claims, key, algorithm=algorithm, headers=extra_headers)
    click.echo(token)


@tokens.command("show")
@click.argument("token", required=False)
@click.option("-i", "--stdin", "from_stdin", is_flag=True, help="read the token from stdin")
@click.option("-f", "--token-file", default=None, help="read the token from this file")
def show(token: str | None, from_stdin: bool, token_file: str | None) -> None:
    """Print a token's header and claims (its signature is not checked)."""
    text = _token_text(token, from_stdin, token_file)
    parts = text.split(".")
    if len(parts) != 3:
        raise CommandError("not a token: expected three parts separated by '.'")
    click.echo(_b64url_text(parts[0]))
    click.echo("---")
    click.echo(_b64url_text(parts[1]))


@tokens.command("validate")
@click.argument("token", required=False)
@click.option("-i", "--stdin", "from_stdin", is_flag=True, help="read the token from stdin")
@click.option("-f", "--token-file", default=None, help="read the token from this file")
@click.option("-sk", "--secret-key", default=None, help="check with this secret key")
@click.option("-pk", "--public-key", default=None, help="check with this public key")
@click.option(
    "-a",
    "--signature-algorithm",
    type=click.Choice(_KEY_PAIR_ALGORITHMS),
    default=None,
    help="the algorithm of --public-key (default: RS256, or ES* for an EC key)",
)
def validate(
    token: str | None,
    from_stdin: bool,
    token_file: str | None,
    secret_key: str | None,
    public_key: str | None,
    signature_algorithm: str | None,
) -> None:
    """Check a token's signature and expiry; print its claims (exit code 1 if invalid)."""
    import jwt

    if (secret_key is None) == (public_key is None):
        raise click.UsageError("give one of --secret-key and --public-key")
    text = _token_text(token, from_stdin, token_file)
    key: Any
    if secret_key is not None:
        key = _key_bytes(secret_key, "--secret-key")
        algorithms = list(_SECRET_BYTES)
    else:
        assert public_key is not None
        key, algorithm = _public_key(_key_bytes(public_key, "--public-key"), signature_algorithm)
        algorithms = [algorithm]
    try:
        claims = jwt.decode(text, key, algorithms=algorithms, options={"verify_aud": False})
    except jwt.InvalidTokenError as exc:
        raise CommandError(f"invalid token: {exc}") from None
    click.echo(json.dumps(claims))


# --- helpers -------------------------------------------------------------------------------------


def _write_private(path: str, data: bytes) -> None:
    """Write a secret to ``path``, readable by its owner only (an existing file's wider mode
    is narrowed before anything is written)."""
    try:
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        with os.fdopen(fd, "wb") as handle:
            os.fchmod(fd, 0o600)
            handle.write(data)
    except OSError as exc:
        raise CommandError(f"cannot write {path}: {exc.strerror or exc}") from None


def _seconds(text: str) -> int:
    seconds = relative_seconds(text, "--expiry-time")
    if seconds <= 0:
        raise click.BadParameter("must be positive", param_hint="--expiry-time")
    return seconds


def _key_bytes(value: str, option: str) -> bytes:
    from starquake.common.key_url import KeyUrlError, read_key_url

    try:
        return read_key_url(value)
    except KeyUrlError as exc:
        raise click.BadParameter(str(exc), param_hint=option) from None


def _hmac_algorithm(size: int) -> str:
    """The strongest HMAC algorithm a key of ``size`` bytes allows (as Pulsar picks it)."""
    for algorithm in ("HS512", "HS384", "HS256"):
        if size >= _SECRET_BYTES[algorithm]:
            return algorithm
    raise click.BadParameter(
        f"the secret key has {size} bytes; HS256 needs at least 32", param_hint="--secret-key"
    )


def _private_key(data: bytes, algorithm: str | None) -> tuple[Any, str]:
    from cryptography.hazmat.primitives import serialization

    try:
        if data.lstrip().startswith(b"-----BEGIN"):
            key = serialization.load_pem_private_key(data, password=None)
        else:
            key = serialization.load_der_private_key(data, password=None)
    except (ValueError, TypeError):
        raise click.BadParameter(
            "not an unencrypted DER or PEM private key", param_hint="--private-key"
        ) from None
    return key, _algorithm_for(key, algorithm, "--private-key")


def _public_key(data: bytes, algorithm: str | None) -> tuple[Any, str]:
    from cryptography.hazmat.primitives import serialization

    try:
        if data.lstrip().startswith(b"-----BEGIN"):
            key = serialization.load_pem_public_key(data)
        else:
            key = serialization.load_der_public_key(data)
    except ValueError:
        raise click.BadParameter("not a DER or PEM public key", param_hint="--public-key") from None
    return key, _algorithm_for(key, algorithm, "--public-key")


def _algorithm_for(key: Any, algorithm: str | None, option: str) -> str:
    """``algorithm`` checked against the key's kind, or the kind's default."""
    from cryptography.hazmat.primitives.asymmetric import ec, rsa

    if isinstance(key, rsa.RSAPrivateKey | rsa.RSAPublicKey):
        chosen = algorithm or "RS256"
        if chosen.startswith("RS"):
            return chosen
    elif isinstance(key, ec.EllipticCurvePrivateKey | ec.EllipticCurvePublicKey):
        by_curve = {256: "ES256", 384: "ES384", 521: "ES512"}
        chosen = algorithm or by_curve.get(key.curve.key_size, "ES256")
        if chosen.startswith("ES"):
            return chosen
    else:
        raise click.BadParameter("only RSA and EC keys are supported", param_hint=option)
    raise click.BadParameter(f"{algorithm} does not fit this key", param_hint=option)


def _token_text(token: str | None, from_stdin: bool, token_file: str | None) -> str:
    if token is not None:
        text = token
    elif from_stdin:
        text = sys.stdin.readline()
    elif token_file is not None:
        try:
            text = Path(token_file).read_text(encoding="utf-8")
        except OSError as exc:
            raise CommandError(f"cannot read {token_file}: {exc.strerror or exc}") from None
    elif os.environ.get("TOKEN"):
        text = os.environ["TOKEN"]
    else:
        raise click.UsageError("give the token, or --stdin, --token-file or $TOKEN")
    return text.strip()


def _b64url_text(part: str) -> str:
    try:
        return base64.urlsafe_b64decode(part + "=" * (-len(part) % 4)).decode("utf-8")
    except (binascii.Error, ValueError):
        raise CommandError("not a token: a part is not base64url") from None
