"""The tests' fake clock and waits, tested themselves: a fake clock that let a
sleeper through early, or a wait that passed on a false condition, would make
every test built on them prove nothing."""

from __future__ import annotations

import asyncio

import pytest

from tests.support.clock import FakeClock
from tests.support.waits import until, until_awaited, wait


async def test_a_sleeper_wakes_only_once_time_reaches_its_deadline() -> None:
    clock = FakeClock(100.0)
    woke: list[float] = []

    async def nap() -> None:
        await clock.sleep(5.0)
        woke.append(clock())

    task = asyncio.create_task(nap())
    await clock.sleeping(1)
    assert clock.next_deadline() == 105.0
    clock.advance(4.999)
    await asyncio.sleep(0)  # a turn: a wrongly woken sleeper would run now
    await clock.sleeping(1)
    assert woke == [] and not task.done()
    clock.advance(0.001)
    await task
    assert woke == [105.0] and clock.sleepers == 0 and clock.slept == [5.0]


async def test_wake_next_and_run_out_move_time_from_deadline_to_deadline() -> None:
    clock = FakeClock(0.0)
    seen: list[float] = []

    async def poll() -> None:
        for _ in range(3):
            await clock.sleep(2.0)
            seen.append(clock())

    task = asyncio.create_task(poll())
    await clock.parked(task.done)
    assert clock.wake_next() == 2.0
    await clock.run_out(task.done)
    assert seen == [2.0, 4.0, 6.0]
    with pytest.raises(AssertionError, match="no sleeper"):
        clock.wake_next()


async def test_a_cancelled_sleeper_leaves_the_queue() -> None:
    clock = FakeClock()
    task = asyncio.create_task(clock.sleep(10.0))
    await clock.sleeping(1)
    task.cancel()
    await asyncio.gather(task, return_exceptions=True)
    assert clock.sleepers == 0 and clock.next_deadline() is None


async def test_an_auto_clock_moves_at_each_sleep_and_never_stands_still() -> None:
    clock = FakeClock(10.0, auto=True)
    await clock.sleep(30.0)
    await clock.sleep(0.0)
    assert clock() == pytest.approx(40.001)


async def test_sleeping_fails_when_nobody_parks() -> None:
    with pytest.raises(AssertionError, match=r"0 of 1 sleepers parked within 0\.05s"):
        await FakeClock().sleeping(1, timeout=0.05)


def test_the_clock_only_advances_but_may_be_set_back() -> None:
    clock = FakeClock(50.0)
    with pytest.raises(ValueError, match="only advances"):
        clock.advance(-1.0)
    clock.set(20.0)  # a wall clock stepped back
    assert clock() == clock.now() == 20.0


async def test_the_waits_return_the_first_true_value_and_fail_on_a_false_one() -> None:
    values = iter([0, "", "found"])
    assert wait(lambda: next(values), 5.0, every=0.001) == "found"
    with pytest.raises(AssertionError, match=r"never true not reached within 0\.05s"):
        wait(lambda: False, 0.05, "never true", every=0.01)
    assert await until(lambda: 7, 1.0) == 7
    with pytest.raises(AssertionError, match="condition not reached"):
        await until(lambda: None, 0.05)

    async def probe() -> str:
        return "answer"

    assert await until_awaited(probe) == "answer"
