"""The exporter's bcrypt line (``exporter.server.AuthPool``) and the client key it
files checks under, fuzzed with hypothesis.

``client_key`` reads the peer address aiohttp reports: any text must give a key,
never an error, and the addresses of one IPv6 /64 one key. The pool is driven by
random programs of arrivals (from a few clients, right or wrong credentials),
requests that go away, and pauses, with small bounds so that they are reached;
after every step its books must hold: every waiting check in exactly one line, no
line over its bound or empty, clients on record only in the lines on record, the
record within its bound, a client with nothing waiting never refused for room
while a client on record has a line; and at the end every check answered (or
cancelled) and nothing left waiting. The narrow race of a request going away just
as a newcomer pushes it out has its own test (tests/exporter/test_auth_flood.py).
"""

from __future__ import annotations

import asyncio
import ipaddress

from hypothesis import given
from hypothesis import strategies as st

from exporter.basicauth import BasicAuth
from exporter.server import AuthPool, Limits, client_key
from tests.fuzz.harness import budget, check

_addresses = st.one_of(
    st.text(max_size=60),
    st.ip_addresses().map(str),
    st.ip_addresses(v=6).map(lambda a: f"{a}%eth0"),
    st.sampled_from(["", "::ffff:10.0.0.1", "127.0.0.1", "fe80::1%lo", "unix:", "::"]),
)


@budget(500)
@given(address=_addresses)
def test_client_key(address: str) -> None:
    def key() -> str:
        out = client_key(address)
        assert isinstance(out, str)
        try:
            ip = ipaddress.ip_address(address)
        except ValueError:
            return out
        if isinstance(ip, ipaddress.IPv6Address) and ip.ipv4_mapped is None:
            # Every address of the /64 is the same client.
            sibling = ipaddress.IPv6Address(int(ip) ^ 0xFFFF)
            assert client_key(str(sibling)) == out
        return out

    check("auth pool client_key", key, ())


class InstantAuth(BasicAuth):
    """A check that costs nothing: "good" passes, anything else fails."""

    def __init__(self) -> None:
        super().__init__({"u": b"x"})

    def check(self, authorization: str | None) -> bool:
        return authorization == "good"


LIMITS = Limits(
    auth_queue=4,
    auth_queue_per_address=3,
    auth_failed_addresses=3,
    auth_wait=2.0,
    refusal_delay=0.0,
)
_step = st.one_of(
    st.tuples(st.just("arrive"), st.integers(0, 5), st.booleans()),
    st.tuples(st.just("pause"), st.integers(0, 3), st.just(False)),
    # A request that goes away: its check is cancelled wherever it is.
    st.tuples(st.just("leave"), st.integers(0, 29), st.just(False)),
)


def _books(pool: AuthPool) -> None:
    lines = {**pool._fresh, **pool._suspect}
    assert len(lines) == len(pool._fresh) + len(pool._suspect), "a client in both rotations"
    assert all(lines.values()), "an empty line kept"
    assert sum(len(line) for line in lines.values()) == pool.waiting
    assert pool.waiting <= LIMITS.auth_queue
    assert all(len(line) <= LIMITS.auth_queue_per_address for line in lines.values())
    assert all(pool.on_record(c) for c in pool._suspect)
    assert not any(pool.on_record(c) for c in pool._fresh)
    assert len(pool._record) <= LIMITS.auth_failed_addresses
    assert 0 <= pool._running <= LIMITS.auth_workers


async def _drive(program: list[tuple[str, int, bool]]) -> None:
    pool = AuthPool(InstantAuth(), LIMITS)
    checks: list[asyncio.Task[bool]] = []
    try:
        for kind, n, good in program:
            if kind == "pause":
                for _ in range(n):
                    await asyncio.sleep(0)
            elif kind == "leave":
                if checks:
                    checks[n % len(checks)].cancel()
            else:
                client = f"10.0.0.{n}"
                newcomer = not pool._line(client) and not pool.on_record(client)
                room_on_record = bool(pool._suspect)
                refused = pool.refused
                checks.append(asyncio.create_task(pool.check("good" if good else "bad", client)))
                await asyncio.sleep(0)  # the check takes its place, or is refused
                if newcomer and room_on_record:
                    assert pool.refused == refused, "a newcomer refused for room"
            _books(pool)
        answers = await asyncio.wait_for(asyncio.gather(*checks, return_exceptions=True), 10.0)
        assert all(isinstance(a, (bool, asyncio.CancelledError)) for a in answers), answers
        _books(pool)
        assert pool.waiting == 0 and pool._running == 0
    finally:
        for task in checks:
            task.cancel()
        await asyncio.gather(*checks, return_exceptions=True)
        pool.close()


@budget(100)
@given(program=st.lists(_step, max_size=30))
def test_auth_pool_books(program: list[tuple[str, int, bool]]) -> None:
    check("auth pool books", lambda: asyncio.run(_drive(program)), ())
