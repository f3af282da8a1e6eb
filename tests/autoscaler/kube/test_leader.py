"""Leader election: two replicas on one fake API server, with the real client.

Durations are short (a 2 s Lease, a 1 s renew deadline) so each scenario takes a
few seconds; the checks sample ``is_leader()`` throughout, because the property
that matters is that two replicas never act at the same moment.
"""

from __future__ import annotations

import asyncio
import re
import time
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Any

import pytest

from autoscaler.kube.client import ClientKube
from autoscaler.kube.errors import Transient
from autoscaler.kube.leader import ElectionThread, LeaderElector, micro_time, parse_time
from autoscaler.kube.protocol import Obj
from tests.support.fakes.apiserver import FakeApiServer, running_apiserver

# Slow (waits out real lease and renew deadlines): `make test-fast` leaves it out.
pytestmark = pytest.mark.slow

LEASE = 2.0
DEADLINE = 1.0
RETRY = 0.2
MICRO_TIME = re.compile(r"^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{6}Z$")


class Partitionable:
    """A ``Kube`` whose lease calls can be cut off, as a network partition cuts one
    replica off the API server while the other still reaches it."""

    def __init__(self, inner: ClientKube) -> None:
        self.inner = inner
        self.cut = False

    def _check(self) -> None:
        if self.cut:
            raise Transient("partitioned", status=0)

    async def get_lease(self, namespace: str, name: str) -> Obj:
        self._check()
        return await self.inner.get_lease(namespace, name)

    async def create_lease(self, namespace: str, body: Obj) -> Obj:
        self._check()
        return await self.inner.create_lease(namespace, body)

    async def replace_lease(self, namespace: str, name: str, body: Obj) -> Obj:
        self._check()
        return await self.inner.replace_lease(namespace, name, body)


class Replica:
    """One controller replica: its elector, its run task, and what it was told."""

    def __init__(
        self,
        api: FakeApiServer,
        tmp_path: Path,
        identity: str,
        clock: Callable[[], float] = time.time,
    ) -> None:
        kubeconfig = api.write_kubeconfig(tmp_path / f"{identity}.kubeconfig")
        self.kube = Partitionable(
            ClientKube.from_config(
                str(kubeconfig), backoff_min=0.01, backoff_max=0.05, request_timeout=1.0
            )
        )
        self.elector = LeaderElector(
            self.kube,  # type: ignore[arg-type]  # only the lease calls are used
            "kube-system",
            "accel-autoscaler",
            identity,
            lease_duration=LEASE,
            renew_deadline=DEADLINE,
            retry_period=RETRY,
            clock=clock,  # writes the Lease's timestamps; intervals are monotonic
        )
        self.identity = identity
        self.started: list[float] = []
        self.stopped: list[float] = []
        self.task: asyncio.Task[None] | None = None

    async def _work(self) -> None:
        self.started.append(time.time())
        await asyncio.Event().wait()  # act until cancelled

    async def _stopped(self) -> None:
        self.stopped.append(time.time())

    def start(self) -> None:
        self.task = asyncio.create_task(self.elector.run(self._work, self._stopped))

    async def stop(self) -> None:
        self.elector.stop()
        assert self.task is not None
        await asyncio.wait_for(self.task, timeout=5)


@pytest.fixture
async def replicas(api: FakeApiServer, tmp_path: Path) -> AsyncIterator[list[Replica]]:
    pair = [Replica(api, tmp_path, "replica-a"), Replica(api, tmp_path, "replica-b")]
    yield pair
    for r in pair:
        if r.task is not None and not r.task.done():
            r.elector.stop()
            r.task.cancel()
            await asyncio.wait_for(asyncio.gather(r.task, return_exceptions=True), timeout=10)


async def watch_leaders(replicas: list[Replica], seconds: float) -> list[list[str]]:
    """Sample who believes it leads, every 20 ms, for ``seconds``."""
    samples = []
    end = time.monotonic() + seconds
    while time.monotonic() < end:
        samples.append([r.identity for r in replicas if r.elector.is_leader()])
        await asyncio.sleep(0.02)
    return samples


async def until(predicate: Any, timeout: float) -> float:
    started = time.monotonic()
    while not predicate():
        if time.monotonic() - started > timeout:
            raise AssertionError(f"not within {timeout}s")
        await asyncio.sleep(0.02)
    return time.monotonic() - started


def lease_of(api: FakeApiServer) -> Obj:
    lease = api.get("leases", "kube-system", "accel-autoscaler")
    assert lease is not None
    return lease


async def test_exactly_one_of_two_replicas_leads(
    api: FakeApiServer, replicas: list[Replica]
) -> None:
    for r in replicas:
        r.start()
    samples = await watch_leaders(replicas, 1.5)
    assert all(len(s) <= 1 for s in samples), "two replicas led at once"
    leaders = [r for r in replicas if r.elector.is_leader()]
    assert len(leaders) == 1
    leader, other = leaders[0], next(r for r in replicas if r is not leaders[0])
    assert len(leader.started) == 1 and other.started == []
    spec = lease_of(api)["spec"]
    assert spec["holderIdentity"] == leader.identity
    assert spec["leaseDurationSeconds"] == 2 and spec["leaseTransitions"] in (0, 1)
    assert MICRO_TIME.match(spec["renewTime"]) and MICRO_TIME.match(spec["acquireTime"])
    renewals = [r for r in api.requests_for("PUT", "/leases/accel-autoscaler$") if r.status == 200]
    assert len(renewals) >= 4  # renewed every retry period


async def test_a_stopped_leader_hands_over_within_the_lease_duration(
    api: FakeApiServer, replicas: list[Replica]
) -> None:
    for r in replicas:
        r.start()
    await until(lambda: any(r.elector.is_leader() for r in replicas), 3)
    leader = next(r for r in replicas if r.elector.is_leader())
    other = next(r for r in replicas if r is not leader)
    transitions = lease_of(api)["spec"]["leaseTransitions"]
    await leader.stop()
    assert not leader.elector.is_leader() and len(leader.stopped) == 1
    took = await until(other.elector.is_leader, LEASE)
    print(f"\ntake-over after a clean stop: {took * 1000:.0f} ms")
    assert took < LEASE
    spec = lease_of(api)["spec"]
    assert spec["holderIdentity"] == other.identity
    assert spec["leaseTransitions"] == transitions + 1
    assert len(other.started) == 1


async def test_a_partitioned_leader_stops_within_the_renew_deadline(
    api: FakeApiServer, replicas: list[Replica]
) -> None:
    for r in replicas:
        r.start()
    await until(lambda: any(r.elector.is_leader() for r in replicas), 3)
    leader = next(r for r in replicas if r.elector.is_leader())
    other = next(r for r in replicas if r is not leader)
    leader.kube.cut = True
    cut_at = time.time()
    samples = await watch_leaders(replicas, LEASE + 1.0)
    assert all(len(s) <= 1 for s in samples), "two replicas led at once"
    assert not leader.elector.is_leader() and other.elector.is_leader()
    assert leader.stopped and leader.stopped[0] - cut_at <= DEADLINE + RETRY + 0.2
    took = other.started[0] - cut_at
    print(
        f"\npartitioned leader stopped after {leader.stopped[0] - cut_at:.2f} s; "
        f"take-over after {took:.2f} s"
    )
    assert took <= LEASE + RETRY + 0.5
    # Back on the network, the old leader stays a candidate: the Lease is held.
    leader.kube.cut = False
    await asyncio.sleep(3 * RETRY)
    assert not leader.elector.is_leader() and len(leader.started) == 1


async def test_a_leader_whose_api_calls_hang_stops_within_the_renew_deadline(
    api: FakeApiServer, replicas: list[Replica]
) -> None:
    leader = replicas[0]
    leader.start()
    await until(leader.elector.is_leader, 3)
    api.faults.delay(1.5, 100, path_regex="/leases/")  # every lease call hangs 1.5 s
    hung_at = time.time()
    took = await until(lambda: not leader.elector.is_leader(), DEADLINE + RETRY + 0.2)
    print(f"\nleader with a hung API server stopped acting after {took:.2f} s")
    await until(lambda: bool(leader.stopped), 2)
    assert leader.stopped[0] - hung_at <= DEADLINE + RETRY + 0.5
    api.faults.clear()


async def test_a_leader_whose_api_calls_fail_stops_and_resumes(
    api: FakeApiServer, replicas: list[Replica]
) -> None:
    leader = replicas[0]
    leader.start()
    await until(leader.elector.is_leader, 3)
    api.faults.fail(10_000, status=500, path_regex="/leases/")
    await until(lambda: not leader.elector.is_leader(), DEADLINE + RETRY + 0.2)
    api.faults.clear()
    await until(leader.elector.is_leader, 2)  # its own Lease: taken back at once
    assert len(leader.started) == 2 and len(leader.stopped) == 1


async def test_an_expired_lease_of_another_holder_is_taken(
    api: FakeApiServer, replicas: list[Replica]
) -> None:
    now = time.time()
    api.add(
        {
            "apiVersion": "coordination.k8s.io/v1",
            "kind": "Lease",
            "metadata": {"name": "accel-autoscaler", "namespace": "kube-system"},
            "spec": {
                "holderIdentity": "crashed",
                "leaseDurationSeconds": 1,
                "renewTime": micro_time(now - 0.5),
                "leaseTransitions": 3,
            },
        }
    )
    replica = replicas[0]
    replica.start()
    await asyncio.sleep(0.3)
    assert not replica.elector.is_leader() and replica.elector.holder == "crashed"
    took = await until(replica.elector.is_leader, 2)
    assert 0.0 < took < 1.0 + RETRY + 0.3
    assert lease_of(api)["spec"]["leaseTransitions"] == 4


def test_settings_are_checked_and_times_round_trip() -> None:
    with pytest.raises(ValueError, match=r"lease duration .* longer than the renew deadline"):
        LeaderElector(None, "ns", "l", "me", lease_duration=5, renew_deadline=5)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="retry period"):
        LeaderElector(None, "ns", "l", "me", renew_deadline=2, retry_period=3)  # type: ignore[arg-type]
    assert micro_time(1767323045.0) == "2026-01-02T03:04:05.000000Z"
    assert parse_time("2026-01-02T03:04:05.000000Z") == 1767323045.0
    assert parse_time("2026-01-02T03:04:05Z") == 1767323045.0
    assert parse_time("garbage") is None and parse_time(None) is None


# -- the election in a thread of its own ----------------------------------------------


class Threaded(Replica):
    """A replica whose elector runs in an ``ElectionThread``; the work of its terms
    runs on the test's loop."""

    def __init__(self, api: FakeApiServer, tmp_path: Path, identity: str) -> None:
        super().__init__(api, tmp_path, identity)
        self.election = ElectionThread(self.elector)
        self.fail_work = False

    async def _work(self) -> None:
        self.started.append(time.time())
        if self.fail_work:
            raise RuntimeError("restore failed")
        await asyncio.Event().wait()

    def start(self) -> None:
        self.election.start(self._work, self._stopped)

    async def stop(self) -> None:
        await self.election.stop(timeout=5)


def renewals_between(api: FakeApiServer, start: float, end: float) -> list[float]:
    return [
        r.time
        for r in api.requests_for("PUT", "/leases/accel-autoscaler$")
        if r.status == 200 and start <= r.time <= end
    ]


@pytest.mark.parametrize("where", ["own thread", "shared loop"])
async def test_a_blocked_event_loop_costs_the_lease_only_when_renewals_share_it(
    tmp_path: Path, where: str
) -> None:
    """The controller's loop held for longer than the Lease (a webhook body parsed in
    one piece did that): with renewals in their own thread the leader keeps the Lease
    and its term's work is never interrupted; on the shared loop it loses it."""
    with running_apiserver() as api:
        replica = Threaded(api, tmp_path, "replica-a")
        if where == "own thread":
            replica.start()
        else:
            replica.task = asyncio.create_task(replica.elector.run(replica._work, replica._stopped))
        try:
            await until(lambda: bool(replica.started), 3)
            holder = lease_of(api)["spec"]["holderIdentity"]
            blocked = time.time()
            time.sleep(LEASE + 0.5)  # the loop held, as a long synchronous parse holds it
            unblocked = time.time()
            renewed = renewals_between(api, blocked, unblocked)
            if where == "own thread":
                assert replica.elector.is_leader()
                assert len(renewed) >= int((LEASE + 0.5) / RETRY) - 2, renewed
                await asyncio.sleep(3 * RETRY)  # the loop turns: nothing steps down
                assert replica.elector.is_leader() and replica.stopped == []
                assert len(replica.started) == 1
                assert lease_of(api)["spec"]["holderIdentity"] == holder
            else:
                assert not replica.elector.is_leader()  # the renew deadline passed
                assert renewed == []
        finally:
            if replica.task is not None:
                replica.elector.stop()
                await asyncio.wait_for(replica.task, timeout=5)
            else:
                await replica.stop()
        assert "holderIdentity" not in lease_of(api)["spec"]  # released on stop
        assert len(replica.stopped) == 1


async def test_work_that_fails_ends_the_candidacy_and_releases_the_lease(
    tmp_path: Path,
) -> None:
    with running_apiserver() as api:
        replica = Threaded(api, tmp_path, "replica-a")
        replica.fail_work = True
        replica.start()
        try:
            await until(lambda: bool(replica.stopped), 5)
            await until(lambda: "holderIdentity" not in lease_of(api)["spec"], 5)
            assert isinstance(replica.election.error, RuntimeError)
            assert not replica.elector.is_leader() and len(replica.started) == 1
        finally:
            await replica.stop()
        assert len(replica.stopped) == 1
