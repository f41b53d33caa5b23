"""A broker a test worker started dies with that worker, even when the worker ends without
running its finalizers (``os._exit``, as pytest-timeout ends a hung test)."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

from polling import wait_for


def _alive(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except FileNotFoundError:
        return False
    return state != "Z"


def test_a_broker_dies_with_the_worker_that_started_it(tmp_path: Path) -> None:
    tests = Path(__file__).parent
    worker = textwrap.dedent(
        f"""
        import os, sys
        sys.path.insert(0, {str(tests)!r})
        from pathlib import Path
        from broker_process import BrokerProcess
        broker = BrokerProcess(Path({str(tmp_path / "data")!r}))
        broker.start()
        print(broker.proc.pid, flush=True)
        os._exit(3)
        """
    )
    done = subprocess.run(
        [sys.executable, "-c", worker], capture_output=True, text=True, timeout=120
    )
    assert done.returncode == 3, done.stderr
    broker_pid = int(done.stdout.split()[0])
    try:
        wait_for(lambda: not _alive(broker_pid), "the orphaned broker to be killed", timeout=30)
    finally:
        if _alive(broker_pid):
            os.kill(broker_pid, 9)
