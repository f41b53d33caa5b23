"""Text about connection URLs, with their credentials hidden (for logs and error messages)."""

from __future__ import annotations

import re

__all__ = ["redact_url"]

_CREDENTIALS = re.compile(r"(://)([^@/,\s]*)@")


def redact_url(text: str) -> str:
    """``text`` with the password (or token) of every ``scheme://credentials@`` hidden."""

    def hide(match: re.Match[str]) -> str:
        user, colon, _ = match.group(2).partition(":")
        return f"{match.group(1)}{user}:***@" if colon else f"{match.group(1)}***@"

    return _CREDENTIALS.sub(hide, text)
