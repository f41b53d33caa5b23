"""The fair scheduling of password checks over random arrivals and departures: admitted checks
start round-robin across addresses and, within one, across user names (FIFO for one user);
limits refuse exactly what is over them; a check whose client left before it started never
runs; and every count returns to zero."""

from __future__ import annotations

import asyncio
import threading
from collections import Counter, OrderedDict, deque

from hypothesis import given, settings
from hypothesis import strategies as st

from starquake.broker.security.password_checks import (
    MAX_CHECKS,
    PER_SOURCE,
    PER_USER,
    PasswordChecks,
)
from starquake.broker.security.provider import AuthenticationError

ARRIVALS = st.lists(
    st.tuples(st.sampled_from("abcd"), st.sampled_from("uvwxyz"), st.booleans()),
    max_size=40,
)


class Recorder:
    """The checks' work: records which ran, in order; the first waits for a gate."""

    def __init__(self) -> None:
        self.gate = threading.Event()
        self.started: list[str] = []

    def verify(self, password: str, hashed: str) -> bool:
        if password == "gate":
            self.gate.wait(10)
        self.started.append(password)
        return password == hashed


def _round_robin(queued: list[tuple[str, str, str]], departed: set[str]) -> list[str]:
    """The order a fair scheduler starts ``queued`` (source, user, name) checks in, once the
    ``departed`` ones have left: addresses round-robin, user names round-robin within one."""
    queues: OrderedDict[str, OrderedDict[str, deque[str]]] = OrderedDict()
    for source, user, name in queued:
        queues.setdefault(source, OrderedDict()).setdefault(user, deque()).append(name)
    for source, users in list(queues.items()):
        for user, queue in list(users.items()):
            for name in [n for n in queue if n in departed]:
                queue.remove(name)
            if not queue:
                del users[user]
        if not users:
            del queues[source]
    order = []
    while queues:
        source, users = next(iter(queues.items()))
        user, queue = next(iter(users.items()))
        order.append(queue.popleft())
        if queue:
            users.move_to_end(user)
        else:
            del users[user]
        if users:
            queues.move_to_end(source)
        else:
            del queues[source]
    return order


@settings(max_examples=60, deadline=None)
@given(ARRIVALS)
def test_fair_order_limits_and_departures(arrivals: list[tuple[str, str, bool]]) -> None:
    recorder = Recorder()
    checks = PasswordChecks(recorder.verify)

    async def scenario() -> None:
        gate = asyncio.create_task(checks.check("gate-address", "gate-user", "gate", "gate"))
        await asyncio.sleep(0)
        tasks: list[tuple[asyncio.Task[bool], str, str, str, bool]] = []
        per_user: Counter[str] = Counter()
        per_source: Counter[str] = Counter()
        expected_refusals = 0
        for i, (source, user, leaves) in enumerate(arrivals):
            name = f"check-{i}"
            over = (
                per_user[user] >= PER_USER
                or per_source[source] >= PER_SOURCE
                or 1 + sum(per_user.values()) >= MAX_CHECKS
            )
            task = asyncio.create_task(checks.check(source, user, name, name))
            await asyncio.sleep(0)
            if over:
                expected_refusals += 1
            else:
                per_user[user] += 1
                per_source[source] += 1
            tasks.append((task, source, user, name, leaves and not over))
        assert checks.in_progress == 1 + sum(per_user.values())
        for task, *_, leaves in tasks:
            if leaves:
                task.cancel()
        await asyncio.sleep(0)
        recorder.gate.set()
        assert await gate
        refusals = 0
        for task, *_ in tasks:
            try:
                assert await task  # each check's password is its hash
            except AuthenticationError:
                refusals += 1
            except asyncio.CancelledError:
                pass
        assert refusals == expected_refusals
        admitted = [(s, u, n) for (t, s, u, n, _) in tasks if not _refused(t)]
        departed = {n for (*_, n, leaves) in tasks if leaves}
        assert recorder.started == ["gate", *_round_robin(admitted, departed)]
        assert checks.in_progress == 0 and checks.done == len(recorder.started)

    try:
        asyncio.run(scenario())
    finally:
        checks.close()


def _refused(task: asyncio.Task[bool]) -> bool:
    return not task.cancelled() and isinstance(task.exception(), AuthenticationError)
