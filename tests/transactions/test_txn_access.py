"""Who may act on a transaction: its owner, anyone when it has none, a super user only with
authentication and authorization both on; a coordinator's requests: super users only, then."""

from __future__ import annotations

import pytest

from starquake.broker.transactions.access import TxnAccess
from starquake.broker.transactions.errors import TransactionNotFoundError
from starquake.broker.transactions.state import CoordinatorState, decode_record, encode_record

TXN = (0, 7)


def _access(checks_on: bool) -> TxnAccess:
    return TxnAccess(checks_on, lambda role: role == "admin")


@pytest.mark.parametrize("checks_on", [True, False])
def test_the_owner_and_anyone_on_an_ownerless_transaction_may_act(checks_on: bool) -> None:
    access = _access(checks_on)
    access.check_owner("alice", "alice", TXN)
    for role in ("alice", "bob", None):
        access.check_owner(None, role, TXN)


def test_a_super_user_may_act_only_with_the_checks_on() -> None:
    _access(True).check_owner("alice", "admin", TXN)
    with pytest.raises(TransactionNotFoundError) as refused:
        _access(False).check_owner("alice", "admin", TXN)
    assert refused.value.message == (
        "Client (admin) is neither the owner of the transaction (0,7) nor a super user"
    )


@pytest.mark.parametrize("checks_on", [True, False])
def test_another_role_is_refused(checks_on: bool) -> None:
    for role in ("bob", None):
        with pytest.raises(TransactionNotFoundError) as refused:
            _access(checks_on).check_owner("alice", role, TXN)
        who = "null" if role is None else role
        assert f"Client ({who}) is neither the owner" in refused.value.message


def test_the_coordinators_requests_need_a_super_user_with_the_checks_on() -> None:
    _access(True).check_coordinator("admin", TXN)
    _access(False).check_coordinator("bob", TXN)
    with pytest.raises(TransactionNotFoundError) as refused:
        _access(True).check_coordinator("bob", TXN)
    assert refused.value.message == (
        "TC client (bob) is not a super user, and is not allowed to operate on transaction (0,7)"
    )


def test_a_log_record_without_owner_replays_as_ownerless() -> None:
    state = CoordinatorState(0)
    record = CoordinatorState.new_record(7, 1000, 1, "alice")
    legacy = {k: v for k, v in record.items() if k != "owner"} | {"seq": 8}
    for logged in (record, legacy):
        state.apply(decode_record(encode_record(logged)))
    assert (state.txns[7].owner, state.txns[8].owner) == ("alice", None)
