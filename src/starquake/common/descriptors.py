"""The process's file-descriptor budget."""

from __future__ import annotations

import resource

__all__ = ["descriptor_limit"]


def descriptor_limit(unlimited: int = 2**20) -> int:
    """The process's open-file limit (its soft ``RLIMIT_NOFILE``; ``unlimited`` when it has
    none)."""
    soft, _ = resource.getrlimit(resource.RLIMIT_NOFILE)
    return soft if soft != resource.RLIM_INFINITY else unlimited
