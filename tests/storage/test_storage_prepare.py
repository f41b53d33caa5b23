"""Opening a managed ledger in two steps: scan off the loop, register on it."""

from __future__ import annotations

import threading

from sq_storage_helpers import MakeFactory, append_all, commit

from starquake.storage import PreparedLedger


def test_prepare_in_a_thread_while_another_ledger_appends(make_factory: MakeFactory) -> None:
    factory = make_factory()
    first = factory.open("a")
    written = append_all(first, [b"a1", b"a2"])
    commit(factory)
    factory.close()

    factory = make_factory()
    busy = factory.open("b")
    result: list[PreparedLedger] = []
    scanner = threading.Thread(target=lambda: result.append(factory.prepare("a")))
    scanner.start()
    append_all(busy, [b"b%d" % i for i in range(100)])
    scanner.join()
    commit(factory)
    assert factory.check_openable("a") is None
    ledger = factory.open_prepared(result[0])
    assert [e.data for e in ledger.read_entries_now(written[0], 10)] == [b"a1", b"a2"]
    assert factory.open("a") is ledger
    new = ledger.append(b"a3")
    commit(factory)
    assert new.ledger_id not in {p.ledger_id for p in written}
    assert new.entry_id == 0


def test_open_prepared_returns_an_instance_opened_meanwhile(make_factory: MakeFactory) -> None:
    factory = make_factory()
    prepared = factory.prepare("x")
    opened = factory.open("x")
    assert factory.check_openable("x") is opened
    assert factory.open_prepared(prepared) is opened
