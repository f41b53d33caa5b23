"""A storm of wrong basic-auth passwords cannot lock other users out, nor push good logins out
of the cache, and unknown user names cost a hash check like known ones.

The storms run against a broker process, from the test, while another user logs in for the
first time with the official client: that login must complete (within the client's operation
timeout) while the storm is still going. Password checks are fair across addresses and
limited per user and per address, so neither a storm against one user nor one from another
address over many users holds every check place.
"""

from __future__ import annotations

import asyncio
import os
import threading
import time
import uuid
from collections import Counter
from collections.abc import Callable, Iterator
from pathlib import Path

import pulsar
import pytest
from auth_support import BASIC_PROVIDER, htpasswd, storm_attempt
from broker_process import BrokerProcess
from passlib.hash import bcrypt, des_crypt
from polling import wait_for

from starquake.broker.config import BrokerConfig
from starquake.broker.security.auth_basic import (
    CACHE_ENTRIES,
    BasicAuthenticationProvider,
    slowest_hash,
)
from starquake.broker.security.password_checks import BUDGET_WINDOW_SECONDS, WORKER_NAME
from starquake.broker.security.provider import AuthenticationError, Credentials
from starquake.protocol._generated import starquake_wire_pb2 as pb

SLOW = bcrypt.using(rounds=10, ident="2y")  # tens of milliseconds a check
SLOWER = bcrypt.using(rounds=12, ident="2y")  # hundreds (htpasswd -B -C 12)
FILLERS = 16
LOGIN_BOUND = 30


class Storm(threading.Thread):
    """CONNECTs with wrong credentials, ``concurrency`` at a time, until stopped (or at most
    ``max_seconds``); counts the broker's answers."""

    def __init__(
        self,
        port: int,
        credentials: Callable[[int], bytes],
        local_host: str = "127.0.0.1",
        concurrency: int = 128,
        max_seconds: float = 120,
    ) -> None:
        super().__init__(name="storm", daemon=True)
        self.port = port
        self.credentials = credentials
        self.local_host = local_host
        self.concurrency = concurrency
        self.max_seconds = max_seconds
        self.stopping = threading.Event()
        self.attempts = 0
        self.codes: Counter[int] = Counter()
        self.error: BaseException | None = None

    def run(self) -> None:
        try:
            asyncio.run(self._main())
        except BaseException as exc:
            self.error = exc

    async def _main(self) -> None:
        async def worker() -> None:
            while not self.stopping.is_set():
                i = self.attempts
                self.attempts += 1
                data = self.credentials(i)
                code = await storm_attempt(self.port, "basic", data, local_host=self.local_host)
                self.codes[code] += 1

        tasks = [asyncio.create_task(worker()) for _ in range(self.concurrency)]
        try:
            await asyncio.wait_for(asyncio.to_thread(self.stopping.wait), self.max_seconds)
        finally:
            self.stopping.set()
            await asyncio.gather(*tasks, return_exceptions=True)

    def finish(self) -> Counter[int]:
        self.stopping.set()
        self.join(timeout=60)
        assert self.error is None, self.error
        return self.codes


@pytest.fixture(scope="module")
def storm_broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[BrokerProcess]:
    directory = tmp_path_factory.mktemp("password-storm")
    users = {"victim": SLOWER.hash("victim-pw"), "alice": SLOW.hash("alice-pw")}
    users.update({f"user{i}": SLOW.hash(f"pw{i}") for i in range(FILLERS)})
    users["superuser"] = SLOW.hash("admin")
    conf = htpasswd(directory / ".htpasswd", users)
    broker = BrokerProcess(
        directory / "data",
        "authenticationEnabled=true",
        f"authenticationProviders={BASIC_PROVIDER}",
        f"basicAuthConf=file://{conf}",
    )
    broker.start()
    try:
        yield broker
    finally:
        broker.cleanup()


def _produce_consume(url: str, auth: pulsar.Authentication) -> None:
    """Produce and consume one message with the official client; the connection and each
    operation must complete within LOGIN_BOUND seconds (password checks run at a low CPU
    priority, and the machine may be busy)."""
    client = pulsar.Client(
        url,
        authentication=auth,
        operation_timeout_seconds=LOGIN_BOUND,
        connection_timeout_ms=LOGIN_BOUND * 1000,
        logger=pulsar.ConsoleLogger(pulsar.LoggerLevel.Error),
    )
    try:
        topic = f"persistent://public/default/storm-{uuid.uuid4().hex[:8]}"
        consumer = client.subscribe(topic, "sub")
        client.create_producer(topic).send(b"hello")
        msg = consumer.receive(timeout_millis=LOGIN_BOUND * 1000)
        assert msg.data() == b"hello"
        consumer.acknowledge(msg)
    finally:
        client.close()


def _all_refused(codes: Counter[int]) -> None:
    """Every storm attempt was refused: answered AuthenticationError, or (a machine so busy
    that its password check waited past the first keep-alive check, as Pulsar does too)
    closed without an answer; never CONNECTED, never another error."""
    assert codes[pb.AuthenticationError] > 0, codes
    assert set(codes) <= {pb.AuthenticationError, -2}, codes


def _login_during(broker: BrokerProcess, storm: Storm, user: str, password: str) -> None:
    """``user``'s login (produce and consume, official client) completes while ``storm`` is
    still going, and every storm attempt was refused."""
    storm.start()
    try:
        wait_for(lambda: storm.attempts >= 300, "the storm to get going", timeout=60)
        _produce_consume(broker.url, pulsar.AuthenticationBasic(user, password))
        assert storm.is_alive() and not storm.stopping.is_set(), "the storm ended first"
    finally:
        codes = storm.finish()
    _all_refused(codes)


@pytest.mark.timeout(300)
def test_storm_against_one_user_leaves_other_users_first_login(
    storm_broker: BrokerProcess,
) -> None:
    storm = Storm(storm_broker.port, lambda i: b"victim:wrong-%d" % i)
    _login_during(storm_broker, storm, "alice", "alice-pw")


@pytest.mark.timeout(300)
def test_storm_from_another_address_over_many_users(storm_broker: BrokerProcess) -> None:
    storm = Storm(
        storm_broker.port, lambda i: b"user%d:wrong-%d" % (i % FILLERS, i), local_host="127.0.0.2"
    )
    _login_during(storm_broker, storm, f"user{FILLERS - 1}", f"pw{FILLERS - 1}")


@pytest.mark.timeout(300)
def test_cached_login_gets_in_while_its_user_is_stormed(storm_broker: BrokerProcess) -> None:
    """A login the broker has accepted before needs no check: the super user gets in while a
    storm of distinct wrong passwords holds every check place of that very user."""
    _produce_consume(storm_broker.url, pulsar.AuthenticationBasic("superuser", "admin"))
    storm = Storm(storm_broker.port, lambda i: b"superuser:guess-%d" % i)
    _login_during(storm_broker, storm, "superuser", "admin")


def _thread_cpu_seconds(pid: int, name: str) -> float | None:
    """CPU time of the thread of process ``pid`` the system names ``name`` (None: none)."""
    for task in Path(f"/proc/{pid}/task").iterdir():
        try:
            if (task / "comm").read_text().strip() != name:
                continue
            fields = (task / "stat").read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")
    return None


@pytest.mark.timeout(300)
def test_password_checks_keep_to_their_cpu_budget(tmp_path: Path) -> None:
    """With ``passwordCheckCpuPercent=10``, a storm of distinct wrong passwords keeps the check
    worker busy, yet its CPU time over a window of seconds (from /proc) stays within 10% of the
    window plus the allowance after idle and about one check; a rightful user's first login
    still completes during the storm."""
    users = {f"user{i}": SLOW.hash(f"pw{i}") for i in range(FILLERS)}
    users["alice"] = SLOW.hash("alice-pw")
    conf = htpasswd(tmp_path / ".htpasswd", users)
    broker = BrokerProcess(
        tmp_path / "data",
        "authenticationEnabled=true",
        f"authenticationProviders={BASIC_PROVIDER}",
        f"basicAuthConf=file://{conf}",
        "passwordCheckCpuPercent=10",
    )
    broker.start()
    storm = Storm(
        broker.port, lambda i: b"user%d:no-%d" % (i % FILLERS, i), "127.0.0.2", concurrency=32
    )
    try:
        storm.start()
        assert broker.proc is not None
        pid = broker.proc.pid

        def worker_cpu() -> float:
            return _thread_cpu_seconds(pid, WORKER_NAME) or 0.0

        wait_for(lambda: _thread_cpu_seconds(pid, WORKER_NAME) is not None, "the worker")
        cpu_before, started = worker_cpu(), time.monotonic()
        _produce_consume(broker.url, pulsar.AuthenticationBasic("alice", "alice-pw"))
        time.sleep(max(0.0, 5.0 - (time.monotonic() - started)))
        used, window = worker_cpu() - cpu_before, time.monotonic() - started
        assert storm.is_alive() and not storm.stopping.is_set(), "the storm ended first"
    finally:
        codes = storm.finish()
        broker.cleanup()
    _all_refused(codes)
    one_check = 0.3  # a check started within the budget runs to its end (tens of ms here)
    assert used <= 0.1 * (window + BUDGET_WINDOW_SECONDS) + one_check, (used, window)


# --- the provider itself: eviction and unknown users ---------------------------------------------


def _provider(tmp_path: Path, users: dict[str, str]) -> BasicAuthenticationProvider:
    conf = htpasswd(tmp_path / ".htpasswd", users)
    # no CPU budget: thousands of checks here, and the test is about the caches
    return BasicAuthenticationProvider(
        BrokerConfig(basicAuthConf=str(conf), passwordCheckCpuPercent=100)
    )


async def _login(provider: BasicAuthenticationProvider, data: bytes) -> bool:
    try:
        await provider.authenticate(Credentials(data, source="192.0.2.1"))
    except AuthenticationError:
        return False
    return True


def test_wrong_passwords_never_evict_a_good_login(tmp_path: Path) -> None:
    """More distinct wrong passwords than the cache holds are each checked and cached as
    refused; the super user's accepted login stays cached: no check the next time."""
    provider = _provider(
        tmp_path, {"superuser": SLOW.hash("admin"), "other": des_crypt.hash("other")}
    )

    wrong = CACHE_ENTRIES + 100
    last = b"other:wrong-%d" % (wrong - 1)

    async def scenario() -> None:
        assert await _login(provider, b"superuser:admin")
        for i in range(wrong):
            assert not await _login(provider, b"other:wrong-%d" % i)
        assert not await _login(provider, last)  # a cached refusal
        checks = provider.checks.done
        assert checks == wrong + 1
        assert await _login(provider, b"superuser:admin")
        assert not await _login(provider, last)
        assert provider.checks.done == checks, "a cached verdict was checked again"

    try:
        asyncio.run(scenario())
    finally:
        provider.close()


def test_unknown_users_cost_a_hash_check(tmp_path: Path) -> None:
    """A user name not in the file is checked against the slowest hash in the file."""
    users = {"known": SLOW.hash("pw"), "old": des_crypt.hash("pw")}
    provider = _provider(tmp_path, users)
    assert provider.decoy == users["known"]
    cheaper = [des_crypt.hash("x"), bcrypt.using(rounds=4).hash("x")]
    assert slowest_hash([cheaper[0], users["known"], cheaper[1]]) == users["known"]

    async def scenario() -> None:
        assert not await _login(provider, b"nobody:pw")
        assert provider.unknown_user_checks == 1 and provider.checks.done == 1
        assert not await _login(provider, b"known:wrong")
        assert provider.checks.done == 2
        assert await _login(provider, b"known:pw")

    try:
        asyncio.run(scenario())
    finally:
        provider.close()


def test_a_check_its_client_gave_up_on_is_remembered(tmp_path: Path) -> None:
    """A client that stops waiting once its check has started (its connection timed out on a
    busy machine) finds the verdict cached when it tries again: the retry costs no check."""
    provider = _provider(tmp_path, {"alice": SLOWER.hash("alice-pw"), "bob": SLOW.hash("b")})

    async def gives_up(data: bytes) -> None:
        waiting = asyncio.create_task(provider.authenticate(Credentials(data, source="192.0.2.1")))
        await asyncio.sleep(0)  # the check starts on the (free) worker at once
        assert provider.checks.in_progress == 1
        waiting.cancel()  # the client leaves
        with pytest.raises(asyncio.CancelledError):
            await waiting
        await asyncio.wait_for(asyncio.to_thread(wait_for, _idle, "the check to finish"), 60)

    def _idle() -> bool:
        return provider.checks.in_progress == 0

    async def scenario() -> None:
        await gives_up(b"alice:alice-pw")
        await gives_up(b"bob:wrong")
        assert provider.checks.done == 2
        assert await _login(provider, b"alice:alice-pw")
        assert not await _login(provider, b"bob:wrong")
        assert provider.checks.done == 2, "the retry was checked again"

    try:
        asyncio.run(scenario())
    finally:
        provider.close()
