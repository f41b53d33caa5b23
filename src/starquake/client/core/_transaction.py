"""Transactions: the coordinator client and the ``Transaction`` handle (as the Java client's).

A client made with ``enable_transaction=True`` opens a transaction on a coordinator: coordinator
``N`` is served by the broker that owns partition ``N`` of
``persistent://pulsar/system/transaction_coordinator_assign`` (found by LOOKUP); the client
connects to it once per connection (TC_CLIENT_CONNECT_REQUEST), then sends NEW_TXN there,
choosing the coordinators in turn (their count, the partitions of that topic, is asked once,
and again after a request failed: the Java client knows it from its start). A message sent in
the transaction first registers its partition with the coordinator (ADD_PARTITION_TO_TXN, once
per partition); committing waits for every send of the transaction to be answered, then sends
END_TXN.

States, as the Java client's: OPEN, COMMITTING, COMMITTED, ABORTING, ABORTED, ERROR; ending a
transaction that is not OPEN raises :class:`InvalidTxnStatusError` without asking the broker.
"""

from __future__ import annotations

import asyncio
import itertools
import weakref
from collections.abc import Callable, Coroutine
from typing import TYPE_CHECKING, Any

from starquake.client.exceptions import (
    InvalidConfiguration,
    InvalidTxnStatusError,
    PulsarException,
    TransactionConflict,
    TransactionCoordinatorNotFoundError,
    from_server_error,
)
from starquake.protocol import txn_commands
from starquake.protocol.wire import pb

if TYPE_CHECKING:
    from starquake.client.core._handler import ClientCore
    from starquake.client.wire._connection import ClientConnection


ASSIGN_TOPIC = "persistent://pulsar/system/transaction_coordinator_assign"
T = pb.BaseCommand


class CoordinatorClient:
    """The client's link to the transaction coordinators (one per client)."""

    def __init__(self, core: ClientCore) -> None:
        self._core = core
        self._turn = itertools.count()
        self._connected: weakref.WeakSet[ClientConnection] = weakref.WeakSet()
        self._urls: dict[int, str] = {}
        self._count = 0
        """How many coordinators there are (0: to be asked)."""

    async def _connection(self, tc_id: int) -> ClientConnection:
        """A connection to the broker serving coordinator ``tc_id`` (looked up once, and again
        after a failed request), connected to it."""
        core = self._core
        url = self._urls.get(tc_id)
        if url is None:
            url = await core.lookup.lookup(f"{ASSIGN_TOPIC}-partition-{tc_id}")
            self._urls[tc_id] = url
        cnx = await core.pool.get_connection(url)
        if cnx not in self._connected:
            rid = core.next_request_id()
            cmd = txn_commands.tc_client_connect_request(rid, tc_id)
            reply = await cnx.request(cmd, rid, core.operation_timeout)
            _raise_error(reply.tc_client_connect_response)
            self._connected.add(cnx)
        return cnx

    async def _request(self, tc_id: int, build: Any) -> Any:
        """Send the request ``build(request_id)`` to coordinator ``tc_id``; its response's
        body (raises the error it reports)."""
        try:
            cnx = await self._connection(tc_id)
            rid = self._core.next_request_id()
            reply = await cnx.request(build(rid), rid, self._core.operation_timeout)
        except BaseException:
            self._urls.pop(tc_id, None)  # the coordinator may have moved: look it up again
            self._count = 0  # and their count may have changed
            raise
        body = next(value for field, value in reply.ListFields() if field.name != "type")
        if body.HasField("error") and body.error in (
            pb.TransactionCoordinatorNotFound,
            pb.ServiceNotReady,
        ):  # the coordinator moved: look it up and connect to it again at the next request
            self._urls.pop(tc_id, None)
            self._connected.discard(cnx)
        _raise_error(body)
        return body

    async def new_txn(self, timeout_ms: int) -> tuple[int, int]:
        """Open a transaction (on the next coordinator in turn); its id."""
        count = self._count
        if count <= 0:
            count = await self._core.lookup.get_partitioned_metadata(ASSIGN_TOPIC)
            if count <= 0:
                raise TransactionCoordinatorNotFoundError("no transaction coordinator is assigned")
            self._count = count
        tc_id = next(self._turn) % count
        try:
            body = await self._request(
                tc_id, lambda rid: txn_commands.new_txn(rid, tc_id, timeout_ms)
            )
        except TransactionCoordinatorNotFoundError:
            self._count = 0  # fewer coordinators now?
            raise
        return int(body.txnid_most_bits), int(body.txnid_least_bits)

    async def add_partition(self, txn: tuple[int, int], topic: str) -> None:
        """Register ``topic`` (a partition) as produced to by ``txn``."""
        await self._request(
            txn[0], lambda rid: txn_commands.add_partition_to_txn(rid, *txn, [topic])
        )

    async def add_subscription(self, txn: tuple[int, int], topic: str, subscription: str) -> None:
        """Register ``subscription`` of ``topic`` as acknowledged on by ``txn``."""
        await self._request(
            txn[0],
            lambda rid: txn_commands.add_subscription_to_txn(rid, *txn, [(topic, subscription)]),
        )

    async def end_txn(self, txn: tuple[int, int], commit: bool) -> None:
        """Commit or abort ``txn``."""
        action = txn_commands.COMMIT if commit else txn_commands.ABORT
        await self._request(txn[0], lambda rid: txn_commands.end_txn(rid, *txn, action))


def _raise_error(body: Any) -> None:
    if body.HasField("error"):
        raise from_server_error(int(body.error), body.message)


def transactions_disabled() -> InvalidConfiguration:
    """What ``new_transaction`` raises on a client made without ``enable_transaction``."""
    return InvalidConfiguration(
        "Transactions are not enabled: create the client with enable_transaction=True"
    )


class Transaction:
    """An open transaction: send messages in it (``send(..., txn=...)``), then
    :meth:`commit` or :meth:`abort` it."""

    def __init__(self, coordinator: CoordinatorClient, txn_id: tuple[int, int]) -> None:
        self._coordinator = coordinator
        self.txn_id = txn_id
        """(most significant bits, least significant bits), as Java's ``TxnID``."""
        self.state = "OPEN"
        self._partitions: dict[str, asyncio.Future[None]] = {}
        self._subscriptions: dict[tuple[str, str], asyncio.Future[None]] = {}
        self._sends: list[asyncio.Future[Any]] = []

    def __repr__(self) -> str:
        return f"Transaction({self.txn_id[0]},{self.txn_id[1]}, {self.state})"

    def check_open(self) -> None:
        """Raise InvalidTxnStatusError unless the transaction is OPEN."""
        if self.state != "OPEN":
            raise InvalidTxnStatusError(
                f"[{self.txn_id[0]}:{self.txn_id[1]}] with unexpected state: {self.state}, "
                "expect OPEN state!"
            )

    async def register_produced_topic(self, topic: str) -> None:
        """Add ``topic`` to the transaction before a first message of it is sent there."""
        self.check_open()
        await self._register(
            self._partitions, topic, lambda: self._coordinator.add_partition(self.txn_id, topic)
        )

    async def register_acked_subscription(self, topic: str, subscription: str) -> None:
        """Add ``subscription`` of ``topic`` to the transaction before its first ack there
        (an ack made while the transaction was OPEN: a commit may have begun since, waiting
        for it)."""
        await self._register(
            self._subscriptions,
            (topic, subscription),
            lambda: self._coordinator.add_subscription(self.txn_id, topic, subscription),
        )

    @staticmethod
    async def _register(
        done: dict[Any, asyncio.Future[None]],
        key: Any,
        request: Callable[[], Coroutine[Any, Any, None]],
    ) -> None:
        """Send ``request`` once per ``key`` (again after it failed); wait for its answer."""
        registered = done.get(key)
        if registered is None:
            registered = asyncio.ensure_future(request())
            done[key] = registered
        try:
            await asyncio.shield(registered)
        except BaseException:
            if done.get(key) is registered:
                del done[key]  # the next one tries again
            raise

    def track(self, send: asyncio.Future[Any]) -> None:
        """A send or ack of the transaction: commit waits until it is answered."""
        self._sends.append(send)

    async def _sent(self) -> None:
        sends, self._sends = self._sends, []
        results = await asyncio.gather(*sends, return_exceptions=True)
        failed = [r for r in results if isinstance(r, BaseException)]
        if failed:
            raise TransactionConflict(f"a send or ack of the transaction failed: {failed[0]}")

    async def commit(self) -> None:
        """Commit: every message sent in the transaction becomes visible, at once."""
        self.check_open()
        self.state = "COMMITTING"
        try:
            await self._sent()
        except PulsarException:
            self.state = "ABORTING"
            await self._end(commit=False)
            raise
        await self._end(commit=True)

    async def abort(self) -> None:
        """Abort: no message sent in the transaction is ever delivered."""
        self.check_open()
        self.state = "ABORTING"
        await asyncio.gather(*self._sends, return_exceptions=True)
        self._sends.clear()
        await self._end(commit=False)

    async def _end(self, commit: bool) -> None:
        try:
            await self._coordinator.end_txn(self.txn_id, commit)
        except BaseException:
            self.state = "ERROR"
            raise
        self.state = "COMMITTED" if commit else "ABORTED"
