"""read_at_hand: a read that completes at once gives its result in the caller's frame; one
that suspends goes on in a task and hands its result over later; no more than MAX_GOING_ON
such reads go on at once (the ones beyond are cancelled, their callers do without)."""

from __future__ import annotations

import asyncio

from starquake.storage.read_now import MAX_GOING_ON, read_at_hand, reads_going_on


async def _at_once(value: int) -> int:
    return value


async def _waiting(gate: asyncio.Event, value: int) -> int:
    await gate.wait()
    return value


def test_a_read_that_does_not_suspend_answers_in_the_callers_frame() -> None:
    got: list[int] = []
    assert read_at_hand(_at_once(7), got.append)
    assert got == [7]


def test_reads_that_suspend_go_on_in_tasks_up_to_the_bound() -> None:
    async def scenario() -> None:
        gate = asyncio.Event()
        got: list[int] = []
        extra = 25
        answers = [read_at_hand(_waiting(gate, i), got.append) for i in range(MAX_GOING_ON + extra)]
        assert not any(answers)
        assert got == []
        assert reads_going_on() == MAX_GOING_ON
        gate.set()
        for _ in range(5):
            await asyncio.sleep(0)
        assert sorted(got) == list(range(MAX_GOING_ON))
        assert reads_going_on() == 0
        # with room again, a suspending read goes on once more
        gate.clear()
        assert not read_at_hand(_waiting(gate, -1), got.append)
        gate.set()
        await asyncio.sleep(0)
        await asyncio.sleep(0)
        assert got[-1] == -1

    asyncio.run(scenario())
