"""A password flood from many addresses against the exporter's bcrypt line (issue 27,
"Destructive steps only on proof"): it filled the auth pool's global queue, so a
valid credential the exporter had not seen yet got 401. Here the real server runs
on 127.0.0.1 with its shipped limits; the flood comes from 32 other loopback
addresses (Linux routes all of 127.0.0.0/8 to the loopback device) with more
guesses in flight than the whole queue holds, and valid newcomers come from yet
other addresses."""

from __future__ import annotations

import asyncio
import secrets
from pathlib import Path

import aiohttp
import bcrypt

from exporter.server import LIMITS, AuthPool, Limits
from exporter.webconfig import WebConfig, load_web_config
from tests.exporter.test_hostile_http import CheckOrder, SlowAuth, basic, serving
from tests.support.waits import until

FLOOD_ADDRESSES = [f"127.0.0.{i}" for i in range(2, 34)]
# Guesses in flight per flooding address: 32 x 9 = 288, more than the 256 checks the
# pool lets wait in all, and under the 16 it lets wait per address, so that only the
# global bound is tested.
GUESSERS_PER_ADDRESS = 9
NEWCOMERS = [("late-a", "127.0.0.34"), ("late-b", "127.0.0.35"), ("late-c", "127.0.0.36")]
# The cost sets how long one check takes, not the order the pool serves them in,
# which is what this test is about; the pool's thread runs at the lowest priority,
# so on a busy machine a cost-10 check (0.13 s alone here) can take seconds and
# the newcomer's 5 s wait would measure the machine, not the pool.
COST = 6


def flood_config(tmp_path: Path) -> tuple[WebConfig, dict[str, str]]:
    passwords = {user: secrets.token_urlsafe(12) for user, _ in NEWCOMERS}
    passwords["prometheus"] = secrets.token_urlsafe(12)
    lines = [
        f"  {user}: '{bcrypt.hashpw(pw.encode(), bcrypt.gensalt(rounds=COST)).decode()}'\n"
        for user, pw in passwords.items()
    ]
    path = tmp_path / "web.yml"
    path.write_text("basic_auth_users:\n" + "".join(lines))
    return load_web_config(path), passwords


async def test_a_flood_from_many_addresses_does_not_refuse_a_new_valid_credential(
    tmp_path: Path,
) -> None:
    cfg, passwords = flood_config(tmp_path)
    assert LIMITS.auth_queue < len(FLOOD_ADDRESSES) * GUESSERS_PER_ADDRESS
    assert LIMITS.auth_queue_per_address > GUESSERS_PER_ADDRESS
    async with serving(cfg, LIMITS) as (port, server):
        pool = server.auth_pool
        assert pool is not None
        checked = CheckOrder(pool)
        url = f"http://127.0.0.1:{port}/metrics"
        stop = asyncio.Event()
        statuses: dict[str, list[int]] = {a: [] for a in FLOOD_ADDRESSES}
        sessions = [
            aiohttp.ClientSession(connector=aiohttp.TCPConnector(limit=0, local_addr=(a, 0)))
            for a in FLOOD_ADDRESSES
        ]

        async def guess(session: aiohttp.ClientSession, address: str) -> None:
            while not stop.is_set():
                wrong = {"Authorization": basic("prometheus", secrets.token_hex(8))}
                async with session.get(url, headers=wrong) as r:
                    statuses[address].append(r.status)

        guessers = [
            asyncio.create_task(guess(s, a))
            for s, a in zip(sessions, FLOOD_ADDRESSES, strict=True)
            for _ in range(GUESSERS_PER_ADDRESS)
        ]
        # For each newcomer: how many guesses bcrypt checked after it reached the
        # pool and before its own check.
        ahead: list[int] = []
        try:
            # The flood is on once every address has had a guess checked and
            # refused: from then on it is what it will stay (32 bcrypt checks).
            def flooding() -> bool:
                assert not any(t.done() for t in guessers), [t for t in guessers if t.done()]
                return all(pool.on_record(a) for a in FLOOD_ADDRESSES)

            await until(flooding, 60.0, "the flood going", every=0.05)
            refused_before = pool.refused
            for user, address in NEWCOMERS:
                connector = aiohttp.TCPConnector(local_addr=(address, 0))
                async with aiohttp.ClientSession(connector=connector) as s:
                    headers = {"Authorization": basic(user, passwords[user])}
                    checked.watch = headers["Authorization"]
                    async with s.get(url, headers=headers) as resp:
                        assert resp.status == 200, (user, address, resp.status)
                    assert checked.arrived is not None
                    ahead.append(checked.started.index(checked.watch) - checked.arrived)
            # The flood kept the whole line full meanwhile: checks were refused.
            assert pool.refused > refused_before
        finally:
            stop.set()
            for task in guessers:
                task.cancel()  # the guesses waiting go away with their connections
            await asyncio.gather(*guessers, return_exceptions=True)
            for s in sessions:
                await s.close()
        # The bound the pool keeps: the check running when the newcomer came, then
        # its own, whatever the number of flooding hosts (each served within the
        # 5 s a check may wait: its 200 says so).
        assert max(ahead) <= 1, ahead
        for address, seen in statuses.items():
            assert seen and set(seen) == {401}, (address, set(seen))
        # Bounded memory: the lines empty as the server sees the connections
        # close, and the record holds the 32 guessers.
        await until(
            lambda: not pool.waiting and not pool._running,
            10.0,
            "the lines empty",
            every=0.05,
        )
        assert sum(pool.on_record(a) for a in FLOOD_ADDRESSES) == len(FLOOD_ADDRESSES)
        assert not any(pool.on_record(a) for _, a in NEWCOMERS)


async def test_a_newcomer_pushes_out_the_longest_line_when_the_pool_is_full() -> None:
    """The bound on all waiting checks refuses from the address with the most
    waiting, not the one that came last: a newcomer always gets a place."""
    auth = SlowAuth(0.1)
    limits = Limits(auth_queue=4, auth_queue_per_address=8, auth_wait=5.0, refusal_delay=0.01)
    pool = AuthPool(auth, limits)
    try:
        flood = [asyncio.create_task(pool.check(f"a{i}", "10.0.0.1")) for i in range(5)]
        await until(lambda: pool.waiting == 4, what="a0 running, a1-a4 in line")
        late = asyncio.create_task(pool.check("good", "10.0.0.2"))
        assert await late is True
        results = await asyncio.gather(*flood)
        # a4, the last of the longest line, made room; 10.0.0.1 went on record at
        # a0's failure, so the newcomer went before a1-a3.
        assert results == [False] * 5
        assert auth.checked == ["a0", "good", "a1", "a2", "a3"]
        assert pool.refused == 1
        assert pool.waiting == 0 and pool._running == 0
    finally:
        pool.close()


async def test_addresses_on_record_wait_behind_those_that_are_not() -> None:
    auth = SlowAuth(0.05)
    pool = AuthPool(auth, Limits(auth_queue=64, auth_wait=5.0))
    try:
        assert await pool.check("bad", "10.0.0.1") is False
        assert pool.on_record("10.0.0.1")
        first = asyncio.create_task(pool.check("x0", "10.0.0.9"))
        await until(lambda: pool._running == 1, what="x0 checked")
        suspect = [asyncio.create_task(pool.check(f"s{i}", "10.0.0.1")) for i in range(3)]
        await until(lambda: pool.waiting == 3, what="the suspects in line")
        newcomer = asyncio.create_task(pool.check("good", "10.0.0.2"))
        assert await newcomer is True
        await asyncio.gather(first, *suspect)
        assert auth.checked == ["bad", "x0", "good", "s0", "s1", "s2"]
        # A success takes an address off the record.
        assert await pool.check("good", "10.0.0.1") is True
        assert not pool.on_record("10.0.0.1") and pool.on_record("10.0.0.9")
    finally:
        pool.close()


async def test_the_record_of_failed_addresses_is_bounded() -> None:
    auth = SlowAuth(0.0)
    pool = AuthPool(auth, Limits(auth_failed_addresses=3))
    try:
        for i in range(5):
            assert await pool.check("bad", f"10.0.0.{i}") is False
        assert [pool.on_record(f"10.0.0.{i}") for i in range(5)] == [False, False, True, True, True]
    finally:
        pool.close()


async def test_an_ipv6_network_is_one_address_to_the_pool() -> None:
    """A host with a /64 has 2^64 addresses: each would otherwise be a new client."""
    auth = SlowAuth(0.0)
    pool = AuthPool(auth, Limits())
    try:
        assert await pool.check("bad", "2001:db8:1:2::17") is False
        assert pool.on_record("2001:db8:1:2:ffff::1")
        assert not pool.on_record("2001:db8:1:3::17")
    finally:
        pool.close()


async def test_a_check_going_away_as_it_is_pushed_out_keeps_the_books() -> None:
    """A waiter whose request went away is cancelled a loop turn before it leaves
    its line; a newcomer pushing it out in between must neither fail nor count
    its place twice."""
    auth = SlowAuth(0.2)
    limits = Limits(auth_queue=2, auth_queue_per_address=8, auth_wait=5.0, refusal_delay=0.01)
    pool = AuthPool(auth, limits)
    try:
        first = asyncio.create_task(pool.check("a0", "10.0.0.1"))
        await until(lambda: pool._running == 1, what="a0 checked")
        waiting = [asyncio.create_task(pool.check(f"a{i}", "10.0.0.1")) for i in (1, 2)]
        await until(lambda: pool.waiting == 2, what="a1 and a2 in line")
        waiting[1].cancel()  # the longest line's last: the one a newcomer pushes out
        late = asyncio.create_task(pool.check("good", "10.0.0.2"))
        results = await asyncio.gather(first, *waiting, late, return_exceptions=True)
        assert results[0] is False and results[1] is False and results[3] is True, results
        assert isinstance(results[2], asyncio.CancelledError)
        assert pool.waiting == 0 and pool._running == 0
    finally:
        pool.close()
