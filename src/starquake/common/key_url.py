"""Key material given the way Pulsar's settings and tools accept it.

A key setting (``tokenSecretKey``, ``tokenPublicKey``, ``--secret-key`` of ``tokens create``,
...) is one of:

- ``data:;base64,<base64>``: the key's bytes, base64-encoded, inline (``data:,<text>`` holds
  them as percent-encoded text);
- ``file:///path/to/key`` (or ``file:/path``): the bytes of that file, as they are (a secret key
  file holds the raw key bytes, a public or private key file DER or PEM);
- a plain path of an existing file: as ``file:``;
- anything else is taken as the base64 text of the key's bytes.
"""

from __future__ import annotations

import base64
import binascii
import urllib.parse
from pathlib import Path


class KeyUrlError(ValueError):
    """A key setting that names no readable key."""


def read_key_url(value: str) -> bytes:
    """The key bytes that ``value`` names (see the module docstring); KeyUrlError if none."""
    text = value.strip()
    if not text:
        raise KeyUrlError("no key given")
    if text.startswith("data:"):
        return _data_url(text)
    if text.startswith("file:"):
        return _read_file(file_url_path(text))
    path = Path(text)
    if path.is_file():
        return _read_file(path)
    try:
        return base64.b64decode(text, validate=True)
    except (binascii.Error, ValueError):
        raise KeyUrlError(
            f"{_shorten(text)!r} is not a data: URL, a file: URL, an existing file or base64 text"
        ) from None


def file_url_path(url: str) -> Path:
    """The path of ``file:///path`` (also ``file:/path`` and ``file://path``)."""
    rest = url[len("file:") :]
    if rest.startswith("//"):
        parts = urllib.parse.urlsplit(url)
        # file:///abs -> "/abs"; file://relative/x (not standard, but seen) -> "relative/x"
        raw = parts.path if parts.netloc in ("", "localhost") else parts.netloc + parts.path
    else:
        raw = rest
    return Path(urllib.parse.unquote(raw))


def _data_url(url: str) -> bytes:
    header, sep, payload = url[len("data:") :].partition(",")
    if not sep:
        raise KeyUrlError("a data: URL needs a ',' before its data")
    if header.split(";")[-1].strip().lower() == "base64":
        try:
            return base64.b64decode(payload.strip(), validate=True)
        except (binascii.Error, ValueError):
            raise KeyUrlError("the data: URL holds invalid base64") from None
    return urllib.parse.unquote_to_bytes(payload)


def _read_file(path: Path) -> bytes:
    try:
        return path.read_bytes()
    except OSError as exc:
        raise KeyUrlError(f"cannot read {path}: {exc.strerror or exc}") from None


def _shorten(text: str) -> str:
    return text if len(text) <= 40 else text[:37] + "..."
