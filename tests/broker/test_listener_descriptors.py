"""The accept loop when the process has no descriptor left: accept() fails with EMFILE and
the listening socket stays readable. It must pause (not spin), log once, and accept the
waiting connections once descriptors are free again. Run in a child process whose
open-file limit is lowered, with real sockets."""

from __future__ import annotations

import json
import subprocess
import sys

CHILD = r"""
import asyncio, json, logging, os, resource

from starquake.broker.listener import Listener, bind

lines = []


class Collect(logging.Handler):
    def emit(self, record):
        lines.append(record.getMessage())


logging.getLogger("starquake.broker.listener").addHandler(Collect())
logging.getLogger("starquake.broker.listener").setLevel(logging.WARNING)


class Served(asyncio.Protocol):
    def __init__(self, served):
        served.append(self)


async def main():
    served = []
    listener = Listener("test port", bind("127.0.0.1", 0, 128), lambda _: Served(served))
    listener.start()
    loop = asyncio.get_running_loop()
    clients = []
    hog = []
    try:
        while True:
            hog.append(os.open("/dev/null", os.O_RDONLY))
    except OSError:
        pass
    for _ in range(4):  # the clients take the last descriptors: accept() has none
        os.close(hog.pop())
        sock = __import__("socket").socket()
        sock.setblocking(False)
        try:
            sock.connect(("127.0.0.1", listener.port))
        except BlockingIOError:
            pass
        clients.append(sock)
    await asyncio.sleep(3)
    starved = {"served": len(served), "pauses": listener.pauses, "lines": list(lines)}
    for fd in hog:
        os.close(fd)
    for _ in range(100):
        if len(served) == 4:
            break
        await asyncio.sleep(0.1)
    print(json.dumps({"starved": starved, "served_after": len(served)}))


soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
resource.setrlimit(resource.RLIMIT_NOFILE, (64, hard))
asyncio.run(main())
"""


def test_accept_pauses_when_descriptors_run_out_and_resumes() -> None:
    done = subprocess.run(
        [sys.executable, "-c", CHILD], capture_output=True, text=True, timeout=120
    )
    assert done.returncode == 0, done.stderr
    result = json.loads(done.stdout.strip().splitlines()[-1])
    starved = result["starved"]
    assert starved["served"] == 0
    # paused about once a second for 3 s; a loop retrying the readable socket would count
    # thousands
    assert 1 <= starved["pauses"] <= 10, starved
    assert len(starved["lines"]) == 1, starved["lines"]
    assert "not accepting connections" in starved["lines"][0]
    assert "Too many open files" in starved["lines"][0]
    assert result["served_after"] == 4
