"""Leader election between two replicas whose wall clocks disagree by two minutes:
one runs 60 s ahead, the other 60 s behind, on one fake API server with the real
client. Each writes ``renewTime`` from its own clock, as a real replica does.

The Lease is held to expire by the time each replica last saw it change, on its own
monotonic clock (client-go's ``observedTime``), so the skew changes nothing: never
two replicas acting at once, across several lease periods and across each kind of
hand-over, and the standby still takes over from a leader that stopped.

The replicas run on one fake clock (``test_leader``'s module docstring says how),
at client-go's durations: a 15 s Lease, a 10 s renew deadline, a 2 s retry.

Under the rule it replaced, ``renewTime + leaseDurationSeconds < local now``, both
orders of this test fail: with the slow replica leading, the fast one finds every
renewal already 120 s old and takes the Lease while the slow one still acts (two
leaders within one retry period); with the fast one leading, the slow one finds
its Lease 120 s in the future and, when it stops, does not take over for two
minutes. ``test_the_old_rule_fails_under_skew`` holds that arithmetic.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest

from autoscaler.kube.leader import Observed, micro_time, parse_time
from tests.autoscaler.kube.test_leader import (
    LEASE,
    RETRY,
    TICK,
    WALL,
    Replica,
    Samples,
    advance_until,
    elapse,
    lease_of,
    settle,
    together,
)
from tests.support.clock import FakeClock
from tests.support.fakes.apiserver import FakeApiServer

SKEW = 60.0


@pytest.fixture
def clock() -> FakeClock:
    return FakeClock(0.0)


@pytest.fixture
async def pair(
    api: FakeApiServer, tmp_path: Path, clock: FakeClock
) -> AsyncIterator[dict[str, Replica]]:
    replicas = {
        "fast": Replica(api, tmp_path, "fast", clock, offset=+SKEW),
        "slow": Replica(api, tmp_path, "slow", clock, offset=-SKEW),
    }
    yield replicas
    for r in replicas.values():
        if r.task is not None and not r.task.done():
            r.elector.stop()  # step down and release, as a clean shutdown does
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(asyncio.shield(r.task), timeout=20)
            r.task.cancel()
            await asyncio.wait_for(asyncio.gather(r.task, return_exceptions=True), timeout=20)
        r.kube.inner.close()


@pytest.mark.parametrize("first", ["fast", "slow"], ids=["fast-clock leads", "slow-clock leads"])
async def test_skewed_replicas_never_lead_together_and_still_hand_over(
    api: FakeApiServer, pair: dict[str, Replica], first: str, clock: FakeClock
) -> None:
    leader = pair[first]
    standby = pair["slow" if first == "fast" else "fast"]
    both = list(pair.values())
    samples: Samples = []  # who believes it leads, at every step of time
    leader.start()
    await settle(clock, both)
    assert leader.elector.is_leader()
    standby.start()
    await settle(clock, both)

    # Several lease periods of renewals written 60 s off true time, either way.
    await elapse(clock, both, 3 * LEASE, samples)
    spec = lease_of(api)["spec"]
    assert spec["holderIdentity"] == leader.identity
    written = parse_time(spec["renewTime"])
    assert written is not None
    offset = SKEW if first == "fast" else -SKEW
    assert abs(written - (WALL + clock() + offset)) <= RETRY  # the last renewal's time
    assert standby.started == [], "the standby took a Lease that was being renewed"
    assert not together(samples)

    # The leader is cut off (a crash, to everyone else): it stops renewing and,
    # past its renew deadline, acting; the standby waits a lease duration from
    # the last renewal it saw, on its own clock.
    leader.kube.cut = True
    cut_at = clock()
    took = await advance_until(clock, both, standby.elector.is_leader, LEASE + 3 * RETRY, samples)
    print(f"\n{first}-clock leader cut off; the other took over after {took:g} fake s")
    assert leader.stopped and leader.stopped[0] <= standby.started[0]
    assert standby.started[0] - cut_at >= LEASE - RETRY  # not before the Lease expired
    assert lease_of(api)["spec"]["holderIdentity"] == standby.identity

    # Back on the network, the old leader stays a standby while the Lease is
    # renewed; a clean stop of the new leader hands back at its next retry.
    leader.kube.cut = False
    await elapse(clock, both, LEASE, samples)
    assert not leader.elector.is_leader() and len(leader.started) == 1
    await standby.stop()
    took = await advance_until(clock, both, leader.elector.is_leader, LEASE, samples)
    print(f"after a clean stop, the first leader took back over in {took:g} fake s")
    assert took < LEASE  # the Lease was released: no waiting for it to expire
    await elapse(clock, both, 4 * RETRY, samples)
    # Sampled at every step, before and after the replicas acted on it.
    assert len(samples) >= 2 * (3 * LEASE + LEASE + 4 * RETRY) / TICK
    assert not together(samples), f"two leaders at once: {together(samples)[:3]}"
    assert any(s[1] == [standby.identity] for s in samples)
    assert samples[-1][1] == [leader.identity]


def old_rule_expired(lease: dict[str, Any], now: float) -> bool:
    """The rule leader.py used to apply: the remote renewTime against the local clock."""
    spec = lease["spec"]
    renewed = parse_time(spec["renewTime"])
    assert renewed is not None
    return renewed + int(spec["leaseDurationSeconds"]) < now


def lease(holder: str, renewed: float, version: str = "1") -> dict[str, Any]:
    return {
        "metadata": {"name": "accel-autoscaler", "resourceVersion": version},
        "spec": {
            "holderIdentity": holder,
            "leaseDurationSeconds": 15,
            "acquireTime": micro_time(renewed),
            "renewTime": micro_time(renewed),
            "leaseTransitions": 0,
        },
    }


def test_the_old_rule_fails_under_skew() -> None:
    real = 1_800_000_000.0  # true time when the Lease is renewed
    # The slow leader renews at true time `real`, writing real - 60. The fast standby
    # reads it one second later, at its local real + 61: already "expired", so it
    # takes a Lease whose holder still acts.
    by_slow = lease("slow", real - SKEW)
    assert old_rule_expired(by_slow, now=real + 1 + SKEW)
    # The fast leader renews once more and stops. 100 s later (more than six lease
    # durations) the slow standby, at its local real + 40, still finds it valid.
    by_fast = lease("fast", real + SKEW)
    assert not old_rule_expired(by_fast, now=real + 100 - SKEW)

    # The observed rule compares only one replica's monotonic readings.
    seen = Observed()
    seen.see(by_slow, now=1000.0)  # one second after the renewal landed
    assert not seen.expired(1001.0) and not seen.expired(1014.9)
    seen.see(by_slow, now=1010.0)  # read again, unchanged: the time does not move
    assert seen.expired(1015.0)
    seen.see(lease("slow", real + 2 - SKEW, "2"), now=1012.0)  # a renewal: it moves
    assert not seen.expired(1026.9) and seen.expired(1027.0)
    # A write whose timestamps did not move (a frozen clock) still counts.
    seen.see(lease("slow", real + 2 - SKEW, "3"), now=1020.0)
    assert not seen.expired(1034.9) and seen.expired(1035.0)
    seen = Observed()
    seen.see(by_fast, now=1000.0)
    assert seen.expired(1015.0)  # fifteen seconds of silence are enough, however it is dated


def test_a_lease_without_a_usable_duration_is_free() -> None:
    seen = Observed()
    assert seen.expired(0.0)  # nothing seen yet
    seen.see({"spec": {"holderIdentity": "x", "renewTime": micro_time(0)}}, now=5.0)
    assert seen.expired(5.0)
    seen.see({"spec": {"holderIdentity": "x", "leaseDurationSeconds": True}}, now=6.0)
    assert seen.expired(6.0)
