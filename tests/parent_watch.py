"""Child processes that die with the test worker that started them.

A worker that pytest-timeout ends with ``os._exit`` (a hung test) runs no fixture finalizers,
so a broker it started would keep running, holding ports, memory and CPU through the rest of
the suite. On Linux, a child asks the kernel (``PR_SET_PDEATHSIG``) for SIGKILL when the thread
that started it exits; that is the worker's process only if the main thread started it, so
only those children ask.
"""

from __future__ import annotations

import ctypes
import os
import signal
import sys
import threading
from collections.abc import Callable

PR_SET_PDEATHSIG = 1


def dies_with_parent(
    then: Callable[[], None] | None = None,
) -> Callable[[], None] | None:
    """A ``preexec_fn`` for ``subprocess.Popen``: the child gets SIGKILL when this process
    ends (if called on the main thread, on Linux), then runs ``then``."""
    if sys.platform != "linux" or threading.current_thread() is not threading.main_thread():
        return then
    parent = os.getpid()
    libc = ctypes.CDLL(None, use_errno=True)

    def in_child() -> None:
        libc.prctl(PR_SET_PDEATHSIG, int(signal.SIGKILL))
        if os.getppid() != parent:  # the parent ended before the request took effect
            os._exit(1)
        if then is not None:
            then()

    return in_child
