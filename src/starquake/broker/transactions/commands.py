"""The connection's handlers of the transaction commands.

With ``transactionCoordinatorEnabled`` off every transaction command is answered with an ERROR
of code NotAllowedError ("Transactions are not enabled."), as Pulsar's ServerCnx does. With it
on, a request fails with its own response carrying the error code (TransactionNotFound,
InvalidTxnStatus, TransactionCoordinatorNotFound, ...), as Pulsar answers.

Who may add to or end a transaction, and send a coordinator's requests: see
:mod:`starquake.broker.transactions.access`.

NEW_TXN's ``txn_ttl_seconds`` carries milliseconds: Pulsar's clients send the timeout in
milliseconds in that field, and its coordinator reads it so.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Coroutine
from typing import Any, Protocol

from starquake.broker.errors import BrokerServiceError, NotAllowedError
from starquake.broker.transactions.coordinator import TransactionCoordinator
from starquake.broker.transactions.errors import TxnId
from starquake.broker.transactions.service import TransactionService
from starquake.protocol import commands, txn_commands
from starquake.protocol.txn_commands import RESPONSE_OF
from starquake.protocol.wire import pb

log = logging.getLogger(__name__)

T = pb.BaseCommand
NOT_ENABLED = "Transactions are not enabled."
SUBSCRIPTION_FAILED = "Handle end txn on subscription failed: "
"""What Pulsar puts before the message of an END_TXN_ON_SUBSCRIPTION it refuses."""
Handler = Callable[[T, bytes | None], None]


class TxnConnection(Protocol):
    """What the handlers use of their connection."""

    def write(self, frame: bytes) -> None:
        """Queue a frame to the client."""

    def spawn(self, coro: Coroutine[Any, Any, None]) -> None:
        """Run ``coro`` as a background task."""

    @property
    def auth_role(self) -> str | None:
        """The connection's authenticated role (None without authentication)."""


class TxnCommands:
    """The transaction command handlers of one connection."""

    def __init__(self, cnx: TxnConnection, service: TransactionService) -> None:
        self._cnx = cnx
        self._service = service
        self._access = service.access

    def table(self) -> dict[int, Handler]:
        """The handler of each transaction command type."""
        return {
            T.TC_CLIENT_CONNECT_REQUEST: self.on_tc_client_connect,
            T.NEW_TXN: self.on_new_txn,
            T.ADD_PARTITION_TO_TXN: self.on_add_partition,
            T.ADD_SUBSCRIPTION_TO_TXN: self.on_add_subscription,
            T.END_TXN: self.on_end_txn,
            T.END_TXN_ON_PARTITION: self.on_end_txn_on_partition,
            T.END_TXN_ON_SUBSCRIPTION: self.on_end_txn_on_subscription,
        }

    def _enabled(self, request_id: int) -> TransactionService | None:
        if not self._service.enabled:
            self._cnx.write(commands.error(request_id, NotAllowedError.code, NOT_ENABLED))
            return None
        return self._service

    def _answer(
        self,
        kind: int,
        request_id: int,
        txn: TxnId,
        work: Coroutine[Any, Any, TxnId | None],
        prefix: str = "",
    ) -> None:
        """Run ``work``; answer with the response of ``kind`` for the transaction it returns
        (``txn`` when None), or with the error it raised (its message after ``prefix``)."""

        async def run() -> None:
            try:
                done = await work
            except BrokerServiceError as exc:
                message = prefix + exc.message
                frame = txn_commands.txn_response(kind, request_id, *txn, exc.code, message)
            except Exception as exc:  # never leave a request unanswered
                log.exception("transaction request %d failed", request_id)
                error = BrokerServiceError(f"Transaction request failed: {exc!r}")
                frame = txn_commands.txn_response(kind, request_id, *txn, error.code, error.message)
            else:
                frame = txn_commands.txn_response(kind, request_id, *(done or txn))
            self._cnx.write(frame)

        self._cnx.spawn(run())

    # --- the client's requests ----------------------------------------------------------------

    def on_tc_client_connect(self, command: T, _: bytes | None) -> None:
        """TC_CLIENT_CONNECT_REQUEST: does this broker serve coordinator ``tc_id``?"""
        request = command.tc_client_connect_request
        service = self._enabled(request.request_id)
        if service is None:
            return

        async def connect() -> None:
            try:
                await service.connect_coordinator(request.tc_id)
            except BrokerServiceError as exc:
                reply = txn_commands.tc_client_connect_response(
                    request.request_id, exc.code, exc.message
                )
            except Exception as exc:  # never leave a request unanswered
                log.exception("TC_CLIENT_CONNECT %d failed", request.request_id)
                error = BrokerServiceError(f"Transaction coordinator not ready: {exc!r}")
                reply = txn_commands.tc_client_connect_response(
                    request.request_id, error.code, error.message
                )
            else:
                reply = txn_commands.tc_client_connect_response(request.request_id)
            self._cnx.write(reply)

        self._cnx.spawn(connect())

    def on_new_txn(self, command: T, _: bytes | None) -> None:
        """NEW_TXN: open a transaction on coordinator ``tc_id``."""
        request = command.new_txn
        service = self._enabled(request.request_id)
        if service is None:
            return

        async def work() -> TxnId:
            coordinator = await service.ready_coordinator(request.tc_id)
            return await coordinator.new_txn(request.txn_ttl_seconds, self._cnx.auth_role)

        self._answer(T.NEW_TXN_RESPONSE, request.request_id, (request.tc_id, 0), work())

    def on_add_partition(self, command: T, _: bytes | None) -> None:
        """ADD_PARTITION_TO_TXN: the transaction produces to these partitions."""
        request = command.add_partition_to_txn
        txn = (request.txnid_most_bits, request.txnid_least_bits)
        service = self._enabled(request.request_id)
        if service is None:
            return

        async def work() -> None:
            await (await self._owned(service, txn)).add_partitions(txn, list(request.partitions))

        self._answer(RESPONSE_OF[T.ADD_PARTITION_TO_TXN], request.request_id, txn, work())

    def on_add_subscription(self, command: T, _: bytes | None) -> None:
        """ADD_SUBSCRIPTION_TO_TXN: the transaction acknowledges on these subscriptions."""
        request = command.add_subscription_to_txn
        txn = (request.txnid_most_bits, request.txnid_least_bits)
        service = self._enabled(request.request_id)
        if service is None:
            return
        added = [(s.topic, s.subscription) for s in request.subscription]

        async def work() -> None:
            await (await self._owned(service, txn)).add_subscriptions(txn, added)

        self._answer(RESPONSE_OF[T.ADD_SUBSCRIPTION_TO_TXN], request.request_id, txn, work())

    def on_end_txn(self, command: T, _: bytes | None) -> None:
        """END_TXN: commit or abort the transaction."""
        request = command.end_txn
        txn = (request.txnid_most_bits, request.txnid_least_bits)
        service = self._enabled(request.request_id)
        if service is None:
            return
        commit = request.txn_action == txn_commands.COMMIT

        async def work() -> None:
            await (await self._owned(service, txn)).end(txn, commit)

        self._answer(T.END_TXN_RESPONSE, request.request_id, txn, work())

    # --- a coordinator's requests to a topic --------------------------------------------------

    def on_end_txn_on_partition(self, command: T, _: bytes | None) -> None:
        """END_TXN_ON_PARTITION: end the transaction on a topic this broker serves."""
        request = command.end_txn_on_partition
        txn = (request.txnid_most_bits, request.txnid_least_bits)
        service = self._enabled(request.request_id)
        if service is None:
            return
        commit = request.txn_action == txn_commands.COMMIT

        async def work() -> None:
            self._access.check_coordinator(self._cnx.auth_role, txn)
            await service.end_on_partition(request.topic, txn, commit)

        self._answer(T.END_TXN_ON_PARTITION_RESPONSE, request.request_id, txn, work())

    def on_end_txn_on_subscription(self, command: T, _: bytes | None) -> None:
        """END_TXN_ON_SUBSCRIPTION: apply (commit) or release (abort) the transaction's
        pending acks on a subscription of a topic this broker serves."""
        request = command.end_txn_on_subscription
        txn = (request.txnid_most_bits, request.txnid_least_bits)
        service = self._enabled(request.request_id)
        if service is None:
            return
        commit = request.txn_action == txn_commands.COMMIT
        target = request.subscription

        async def work() -> None:
            self._access.check_coordinator(self._cnx.auth_role, txn)
            await service.end_on_subscription(target.topic, target.subscription, txn, commit)

        kind = T.END_TXN_ON_SUBSCRIPTION_RESPONSE
        self._answer(kind, request.request_id, txn, work(), SUBSCRIPTION_FAILED)

    async def _owned(self, service: TransactionService, txn: TxnId) -> TransactionCoordinator:
        """The coordinator of ``txn`` (recovered here first if this broker owns it), once the
        connection's role may act on ``txn`` (TransactionCoordinatorNotFound,
        TransactionNotFound otherwise)."""
        coordinator = await service.ready_coordinator(txn[0])
        meta = coordinator.state.get(txn)
        self._access.check_owner(meta.owner, self._cnx.auth_role, txn)
        return coordinator
