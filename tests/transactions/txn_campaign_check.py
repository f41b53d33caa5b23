"""What a transactions kill -9 campaign records of its transactions, and the checks of what the
broker kept against it.

Each transaction sends one message per output topic it writes to (payload ``<key>|<topic>``)
and acknowledges input messages (payload ``in|<topic>|<n>``) on their subscription. After the
campaign every transaction has ended (committed, or aborted by its client or at its timeout);
what the broker then holds must be, for each transaction, all or nothing:

- all its messages stored and visible, and all its acks applied (the input messages it
  acknowledged are never delivered again), or
- none of its messages ever delivered, and the input messages it acknowledged delivered again;

a commit that was answered is visible, an abort that was answered never is, and no message is
stored twice.
"""

from __future__ import annotations

import threading
from collections import Counter
from dataclasses import dataclass, field

COMMITTED = "committed"
ABORTED = "aborted"
UNKNOWN = "unknown"


@dataclass
class TxnRecord:
    """One transaction as its client saw it."""

    key: str
    txn_id: tuple[int, int]
    sent: list[tuple[str, bytes]] = field(default_factory=list)
    """(output topic, payload) of every send attempted in it."""
    acked: list[bytes] = field(default_factory=list)
    """The payloads of the input messages it acknowledged (or tried to)."""
    answer: str = UNKNOWN
    """COMMITTED / ABORTED when the client got that answer; UNKNOWN otherwise."""
    note: str = ""


class Ledger:
    """The campaign's transaction records (thread-safe append)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self.records: list[TxnRecord] = []

    def add(self, record: TxnRecord) -> None:
        with self._lock:
            self.records.append(record)


@dataclass
class Observed:
    """What the broker holds after the campaign."""

    stored: dict[str, list[bytes]]
    """Per output topic, every payload a reader from the earliest gets (transactional ones)."""
    delivered: set[bytes]
    """Every output payload a live consumer got at any time during the campaign."""
    inputs: set[bytes]
    """Every input message produced."""
    remaining: list[bytes]
    """The input messages still delivered after the campaign (not acknowledged)."""


@dataclass
class Verdict:
    """The figures of a campaign and the invariants it broke."""

    answered: Counter[str] = field(default_factory=Counter)
    """Transactions by the answer the client got (committed / aborted / unknown)."""
    outcome: Counter[str] = field(default_factory=Counter)
    """Transactions by what the broker made of them (committed / aborted / partial)."""
    violations: list[str] = field(default_factory=list)

    def summary(self) -> str:
        a, o = self.answered, self.outcome
        return (
            f"{sum(a.values())} transactions: committed-answered {a[COMMITTED]}, "
            f"aborted-answered {a[ABORTED]}, unknown-outcome {a[UNKNOWN]} "
            f"(ended committed {o[COMMITTED]}, aborted {o[ABORTED]}, partial {o['partial']}); "
            f"{len(self.violations)} violations"
        )


def check(records: list[TxnRecord], seen: Observed) -> Verdict:
    """Check every transaction of ``records`` against what the broker holds."""
    verdict = Verdict()
    problems = verdict.violations
    stored_count: Counter[tuple[str, bytes]] = Counter(
        (topic, payload) for topic, payloads in seen.stored.items() for payload in payloads
    )
    for (topic, payload), count in stored_count.items():
        if count > 1:
            problems.append(f"duplicate: {payload!r} stored {count} times on {topic}")
    committed_acks: Counter[bytes] = Counter()
    by_payload: dict[bytes, TxnRecord] = {}
    for record in records:
        verdict.answered[record.answer] += 1
        for _, payload in record.sent:
            by_payload[payload] = record
        visible = [(t, p) for t, p in record.sent if stored_count[(t, p)] > 0]
        where = f"txn {record.key} {record.txn_id} (answer {record.answer}{record.note})"
        if visible and len(visible) < len(record.sent):
            verdict.outcome["partial"] += 1
            missing = [p for t, p in record.sent if stored_count[(t, p)] == 0]
            problems.append(f"{where}: partly visible, missing {missing}")
            continue
        ended_committed = bool(visible)
        verdict.outcome[COMMITTED if ended_committed else ABORTED] += 1
        if record.answer == COMMITTED and not ended_committed:
            problems.append(f"{where}: commit answered but its messages are not visible")
        if record.answer == ABORTED and ended_committed:
            problems.append(f"{where}: abort answered but its messages are visible")
        if ended_committed:
            committed_acks.update(record.acked)
        else:
            delivered = [p for _, p in record.sent if p in seen.delivered]
            if delivered:
                problems.append(f"{where}: ended aborted but {delivered} were delivered")
    for payload in seen.delivered:
        if payload not in by_payload and b"|" in payload and not payload.startswith(b"sentinel"):
            problems.append(f"delivered {payload!r} of no transaction")
    remaining = Counter(seen.remaining)
    for payload, count in committed_acks.items():
        if count > 1:
            problems.append(f"input {payload!r} acknowledged by {count} committed transactions")
        if remaining[payload]:
            problems.append(f"input {payload!r} acknowledged in a committed txn, delivered again")
    for payload in seen.inputs:
        if payload not in committed_acks and not remaining[payload]:
            problems.append(f"input {payload!r} never acknowledged in a commit, yet not delivered")
    return verdict
