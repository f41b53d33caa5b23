"""Permissions of the broker's data directory (``dataDir``).

The directory holds every message and the metadata, so it is private by default:
``dataDirPermissions`` (octal, default ``700``) is the mode the broker gives it.

- A directory the broker creates gets exactly that mode.
- An existing directory loses the bits beyond it (``755`` becomes ``700``); no bit is ever
  added, and a directory the broker may not change (another owner) is used as it is, with a
  warning, so that a restart never fails over permissions.
- ``starquake standalone`` also narrows its umask to the same mode, so that files and
  directories it creates inside get no more (``600``/``700`` by default, whatever the umask).
  The in-process broker leaves its host's umask alone; the directory's mode keeps others out.
"""

from __future__ import annotations

import logging
import os
import stat
from pathlib import Path

from starquake.storage.dirlock import make_dirs

log = logging.getLogger(__name__)


def prepare_data_dir(path: Path, mode: int) -> None:
    """Create ``path`` with ``mode``, or take the bits beyond ``mode`` off an existing one."""
    if not path.exists():
        make_dirs(path)
        os.chmod(path, mode)
        return
    current = stat.S_IMODE(path.stat().st_mode)
    if not current & ~mode:
        return
    narrowed = current & mode
    try:
        os.chmod(path, narrowed)
    except OSError as exc:
        log.warning(
            "data directory %s has mode %o, wider than dataDirPermissions %o; cannot narrow it "
            "(%s)",
            path,
            current,
            mode,
            exc.strerror or exc,
        )
        return
    log.info(
        "narrowed the permissions of data directory %s from %o to %o (dataDirPermissions)",
        path,
        current,
        narrowed,
    )


def restrict_umask(mode: int) -> None:
    """Narrow this process's umask so that nothing it creates gets bits beyond ``mode``
    (for a process that is only the broker: ``starquake standalone``)."""
    current = os.umask(0o077)
    os.umask(current | (0o777 & ~mode))
