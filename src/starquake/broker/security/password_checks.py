"""Fair scheduling of slow password checks, so that a storm of wrong passwords cannot starve
other users' logins.

A bcrypt check costs up to hundreds of milliseconds of CPU. The checks run on a dedicated
worker thread (:data:`CHECK_WORKERS`, at a lower CPU priority than the event loop), never on
the event loop nor on the thread pool storage uses. Waiting checks are queued per client
address and user name; the worker takes addresses round-robin and, within an address, user
names round-robin, so a login waits for at most one check per other busy address, and within
its own address one per other user name with waiting checks. Limits refuse a check at once, without
costing any CPU, when:

- one user name already has :data:`PER_USER` checks running or waiting (a storm against one
  user keeps at most that many places, whatever the number of connections or addresses);
- one address already has :data:`PER_SOURCE` (a storm from one address over many user names);
- :data:`MAX_CHECKS` are running or waiting in all.

A check whose client went away before it started is dropped from the queue.

CPU budget: the worker spends at most ``cpu_share`` of one core on checks (measured as the
worker thread's CPU time), averaged over :data:`BUDGET_WINDOW_SECONDS`: after an idle time it
may spend ``cpu_share * BUDGET_WINDOW_SECONDS`` at once, then the next check starts only once
the CPU time of the previous ones has been earned back (a check costing ``c`` seconds of CPU
earns back in ``c / cpu_share`` seconds). Meanwhile checks wait in the fair queue,
and a storm's surplus is refused at once by the limits above, so a storm of wrong passwords
costs a bounded share of the machine while a rightful login still waits for at most one check
per other busy address.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import threading
import time
from collections import Counter, OrderedDict, deque
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, field

from starquake.broker.security.provider import AuthenticationError

__all__ = ["CHECK_WORKERS", "MAX_CHECKS", "PER_SOURCE", "PER_USER", "PasswordChecks"]

CHECK_WORKERS = 1
PER_USER = 4
PER_SOURCE = 8
MAX_CHECKS = 256
WORKER_NICENESS = 5
"""The worker thread's nice value: a CPU weight about a third of a normal thread's, so checks
yield to serving clients, yet still progress on a machine busy with other processes (at 10, a
tenth, one check could take a minute on a heavily loaded machine)."""
WORKER_NAME = "sq-passwords"
"""The worker thread's name, as the system shows it (``top -H``, ``/proc/PID/task/TID/comm``)."""
BUDGET_WINDOW_SECONDS = 4.0
"""The time over which the CPU budget is averaged."""


@dataclass(eq=False)
class _Check:
    source: str
    user: str
    password: str
    hashed: str
    result: asyncio.Future[bool] = field(repr=False)
    started: bool = False


class PasswordChecks:
    """Runs ``verify(password, hashed)`` on the worker thread, fairly across addresses."""

    def __init__(self, verify: Callable[[str, str], bool], cpu_share: float = 1.0) -> None:
        self._verify = verify
        self.cpu_share = cpu_share
        """The most of one core the checks take, on average (1.0: the worker runs freely)."""
        self._burst = cpu_share * BUDGET_WINDOW_SECONDS
        self._balance = self._burst
        """CPU seconds the worker may still spend now (negative: owed)."""
        self._earned_at = time.monotonic()
        self._earn_timer: asyncio.TimerHandle | None = None
        self._executor: ThreadPoolExecutor | None = None
        # address -> user name -> waiting checks; both levels taken round-robin
        self._queues: OrderedDict[str, OrderedDict[str, deque[_Check]]] = OrderedDict()
        self._by_user: Counter[str] = Counter()
        self._by_source: Counter[str] = Counter()
        self._running = 0
        self.in_progress = 0
        """Checks running or waiting."""
        self.done = 0
        """Checks the worker has finished."""
        self.cpu_seconds = 0.0
        """CPU time the checks took, in all."""

    async def check(
        self,
        source: str,
        user: str,
        password: str,
        hashed: str,
        on_verdict: Callable[[bool], None] | None = None,
    ) -> bool:
        """Whether ``password`` matches ``hashed``; AuthenticationError if a limit refuses.

        ``on_verdict`` is called with the verdict once the check has run, even if the caller
        stopped waiting meanwhile (a client that timed out and retries then needs no new check).
        """
        if self._by_user[user] >= PER_USER:
            raise AuthenticationError("too many password checks for this user; try again later")
        if self._by_source[source] >= PER_SOURCE:
            raise AuthenticationError("too many password checks from this address; try again later")
        if self.in_progress >= MAX_CHECKS:
            raise AuthenticationError("too many password checks in progress; try again later")
        job = _Check(source, user, password, hashed, asyncio.get_running_loop().create_future())
        if on_verdict is not None:
            job.result.add_done_callback(_verdict_to(on_verdict))
        self._queues.setdefault(source, OrderedDict()).setdefault(user, deque()).append(job)
        self._count(job, 1)
        self._pump()
        try:
            return await asyncio.shield(job.result)
        except asyncio.CancelledError:
            if not job.started:  # the client went away: nobody waits for this check
                self._drop(job)
            raise

    def _count(self, job: _Check, delta: int) -> None:
        self._by_user[job.user] += delta
        self._by_source[job.source] += delta
        self.in_progress += delta
        if delta < 0:
            if self._by_user[job.user] <= 0:
                del self._by_user[job.user]
            if self._by_source[job.source] <= 0:
                del self._by_source[job.source]

    def _drop(self, job: _Check) -> None:
        users = self._queues.get(job.source)
        queue = users.get(job.user) if users is not None else None
        if users is not None and queue is not None and job in queue:
            queue.remove(job)
            if not queue:
                del users[job.user]
                if not users:
                    del self._queues[job.source]
            self._count(job, -1)

    def _next(self) -> _Check:
        """The next check to start: the first address's first user's oldest check; both
        then go to the back of their turn."""
        source, users = next(iter(self._queues.items()))
        user, queue = next(iter(users.items()))
        job = queue.popleft()
        if queue:
            users.move_to_end(user)
        else:
            del users[user]
        if users:
            self._queues.move_to_end(source)
        else:
            del self._queues[source]
        return job

    def _affordable(self) -> bool:
        """Whether the CPU budget allows a check now; if not, pump again once it does."""
        if self.cpu_share >= 1.0:
            return True
        now = time.monotonic()
        earned = (now - self._earned_at) * self.cpu_share
        self._balance = min(self._burst, self._balance + earned)
        self._earned_at = now
        if self._balance > 0:
            return True
        if self._earn_timer is None:
            wait = -self._balance / self.cpu_share + 0.001
            self._earn_timer = asyncio.get_running_loop().call_later(wait, self._earned)
        return False

    def _earned(self) -> None:
        self._earn_timer = None
        self._pump()

    def _pump(self) -> None:
        """Start waiting checks while a worker is free and the budget allows, one address
        after another."""
        while self._running < CHECK_WORKERS and self._queues and self._affordable():
            job = self._next()
            job.started = True
            self._running += 1
            if self._executor is None:
                self._executor = ThreadPoolExecutor(
                    CHECK_WORKERS, thread_name_prefix="starquake-auth", initializer=_lower_priority
                )
            future = self._executor.submit(_timed, self._verify, job.password, job.hashed)
            future.add_done_callback(self._notifier(job))

    def _notifier(self, job: _Check) -> Callable[[Future[tuple[bool, float]]], None]:
        """A done-callback (run on the worker thread) that hands the result to the loop."""
        loop = asyncio.get_running_loop()

        def notify(future: Future[tuple[bool, float]]) -> None:
            with contextlib.suppress(RuntimeError):  # the loop is closed: the broker stopped
                loop.call_soon_threadsafe(self._finished, job, future)

        return notify

    def _finished(self, job: _Check, future: Future[tuple[bool, float]]) -> None:
        self._running -= 1
        self.done += 1
        self._count(job, -1)
        if future.cancelled():
            outcome: BaseException | bool = AuthenticationError("the broker is stopping")
        elif (error := future.exception()) is not None:
            outcome = error
        else:
            outcome, cpu = future.result()
            self.cpu_seconds += cpu
            self._balance -= cpu
        if not job.result.done():
            if isinstance(outcome, BaseException):
                job.result.set_exception(outcome)
            else:
                job.result.set_result(outcome)
        self._pump()

    def close(self) -> None:
        """Stop the worker thread (checks not started are abandoned)."""
        if self._earn_timer is not None:
            self._earn_timer.cancel()
            self._earn_timer = None
        if self._executor is not None:
            self._executor.shutdown(wait=False, cancel_futures=True)
            self._executor = None


def _verdict_to(on_verdict: Callable[[bool], None]) -> Callable[[asyncio.Future[bool]], None]:
    """A done-callback that hands a check's verdict (not a refusal or failure) to ``on_verdict``."""

    def hand_over(result: asyncio.Future[bool]) -> None:
        if not result.cancelled() and result.exception() is None:
            on_verdict(result.result())

    return hand_over


def _timed(verify: Callable[[str, str], bool], password: str, hashed: str) -> tuple[bool, float]:
    """``verify(password, hashed)`` and the CPU time it took this thread."""
    start = time.thread_time()
    verdict = verify(password, hashed)
    return verdict, time.thread_time() - start


def _lower_priority() -> None:
    """Run this worker thread at a lower CPU priority than the event loop (Linux: the nice
    value is per thread), so that password checks yield to serving clients; name it."""
    native_id = threading.get_native_id()
    # not Linux, or not allowed: normal priority
    with contextlib.suppress(AttributeError, OSError):
        os.setpriority(os.PRIO_PROCESS, native_id, WORKER_NICENESS)
    with contextlib.suppress(OSError), open(f"/proc/self/task/{native_id}/comm", "w") as comm:
        comm.write(WORKER_NAME)
