"""Leader election over a ``coordination.k8s.io/v1`` Lease, through ``Kube`` only.

Two replicas of the controller run for availability; only one may act, or two
drains of one node would race. The protocol is client-go's ``leaderelection``:

- a candidate takes the Lease when it is absent, expired, released (no holder), or
  already its own;
- "expired" is measured on this replica's own monotonic clock, as client-go does
  (``observedTime``, ``observedRecord``): the Lease is expired when
  ``leaseDurationSeconds`` have passed, locally, since this replica last *saw its
  record change* (holder, ``renewTime``, ``acquireTime``, duration, transitions).
  The ``renewTime`` written in it is never compared with the local clock. It was
  once, and two replicas whose clocks disagree by more than the lease duration both
  led: the fast one found every renewal of the slow one already expired, and the
  slow one never found a stopped fast leader's Lease expired. Wall clocks only
  write the Lease's timestamps, for people and other tools to read;
- the leader renews every ``retry_period``; every write carries the Lease's
  ``resourceVersion``, so of two replicas that race, one gets ``Conflict`` and
  stays a candidate;
- a leader that has not renewed within ``renew_deadline`` stops leading. It does
  so even before its renewal loop notices: ``is_leader()`` compares its monotonic
  clock with the start of the last successful renewal, so an action that checks it
  before each API write stops within the deadline when the API server is
  unreachable. That is why one leader at a time holds whatever the wall clocks
  say: a standby saw the last renewal no earlier than the leader started it, and
  waits ``lease_duration`` (> ``renew_deadline``) from then, on its own clock;
- a clean stop releases the Lease (holder cleared), so the other replica takes
  over at its next retry instead of waiting for the Lease to expire.

Every API call is bounded by the time left before the deadline, so a hung API
server cannot keep a stale leader believing it leads.

Where the renewals run: ``ElectionThread`` runs the elector in a thread of its
own, on an event loop of its own, with its own worker threads for the API calls.
On the controller's loop it shared the turn with everything else: the webhook,
the evaluation cycle, the actions. Any of them holding the loop for longer than
the renew deadline (a 4 MiB Alertmanager body took up to a second, and they came
one after another) made the leader miss its renewals, step down and drop every
alert it held, with nothing wrong but a busy loop. In its own thread a renewal
waits only for the API server and, between bytecodes, for the interpreter lock,
which no request holds for long. The rest stays as it was:

- ``is_leader()`` reads two values that only the election thread writes, a flag
  and a monotonic timestamp, each assigned whole; read from any thread it says
  no as soon as the deadline passes, whether or not the election thread has
  noticed. A reader that sees the flag set with an older timestamp answers no
  early, never yes late;
- the terms reach the controller's loop in order, through a queue: the work of a
  term (``on_started_leading``) runs there as a task, is cancelled when the term
  ends, and ``on_stopped_leading`` runs after it, before the next term starts;
- work that fails ends the replica's candidacy: the election thread is stopped
  and releases the Lease, so that another replica takes over, as when the
  elector ran on the controller's loop.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import threading
import time
from collections.abc import Awaitable, Callable, Coroutine
from datetime import UTC, datetime
from typing import Any

from autoscaler.kube.errors import Conflict, KubeError, NotFound
from autoscaler.kube.protocol import Kube, Obj

log = logging.getLogger(__name__)

LEASE_API_VERSION = "coordination.k8s.io/v1"
# The fields of client-go's LeaderElectionRecord, as a Lease spells them.
RECORD_FIELDS = (
    "holderIdentity",
    "leaseDurationSeconds",
    "acquireTime",
    "renewTime",
    "leaseTransitions",
)


def micro_time(ts: float) -> str:
    """A Kubernetes ``MicroTime``: ``2026-01-02T03:04:05.000000Z``."""
    return datetime.fromtimestamp(ts, UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def parse_time(value: Any) -> float | None:
    """A ``MicroTime`` or ``Time`` string as a Unix timestamp; None if absent or bad."""
    if not isinstance(value, str) or not value:
        return None
    try:
        parsed = datetime.fromisoformat(value.replace("Z", "+00:00"))
    except ValueError:
        return None
    if parsed.tzinfo is None:
        parsed = parsed.replace(tzinfo=UTC)
    return parsed.timestamp()


def lease_record(lease: Obj) -> tuple[Any, ...]:
    """What a Lease says, as client-go's ``observedRawRecord`` compares it, with its
    ``resourceVersion``: any change of it is the holder (or a new one) being alive.
    The version makes every successful write count, even one whose timestamps did
    not move (a clock that is frozen or stepped back)."""
    spec: Obj = lease.get("spec") or {}
    version = (lease.get("metadata") or {}).get("resourceVersion")
    return (version, *(spec.get(k) for k in RECORD_FIELDS))


class Observed:
    """The Lease as this replica last saw it change, and when, on its own monotonic
    clock. The Lease is expired once its ``leaseDurationSeconds`` have passed since
    then with no change seen: how long the holder said it would stay, measured here,
    so that no two clocks are ever compared."""

    def __init__(self) -> None:
        self.record: tuple[Any, ...] | None = None
        self.at = 0.0
        self.duration: int | None = None

    def see(self, lease: Obj, now: float) -> None:
        """Note the Lease as read at ``now`` (monotonic); the time only moves when
        the record differs from the one seen before."""
        record = lease_record(lease)
        if record != self.record:
            self.record, self.at = record, now
            duration = (lease.get("spec") or {}).get("leaseDurationSeconds")
            self.duration = None
            if isinstance(duration, int) and not isinstance(duration, bool) and duration > 0:
                self.duration = duration

    def expired(self, now: float) -> bool:
        """Whether the Lease last seen is free to take at ``now`` (monotonic)."""
        if self.record is None or self.duration is None:
            return True  # never seen, or a Lease nobody keeps properly
        return now - self.at >= self.duration


class LeaderElector:
    """One replica's side of the election. ``run`` campaigns, leads and steps down
    until ``stop()`` is called or the task is cancelled; ``is_leader()`` says, at
    any moment, whether this replica may act."""

    def __init__(
        self,
        kube: Kube,
        namespace: str,
        name: str,
        identity: str,
        *,
        lease_duration: float = 15.0,
        renew_deadline: float = 10.0,
        retry_period: float = 2.0,
        clock: Callable[[], float] = time.time,
        monotonic: Callable[[], float] = time.monotonic,
        sleep: Callable[[float], Awaitable[Any]] = asyncio.sleep,
    ) -> None:
        """``clock`` (the wall clock) only writes the Lease's timestamps;
        ``monotonic`` measures every interval: the renew deadline and expiry."""
        problems = []
        if not lease_duration > renew_deadline:
            problems.append(
                f"lease duration ({lease_duration}s) must be longer than the renew deadline "
                f"({renew_deadline}s), or a replica could take over while the leader still acts"
            )
        if not renew_deadline > retry_period > 0:
            problems.append(
                f"the renew deadline ({renew_deadline}s) must be longer than the retry period "
                f"({retry_period}s), which must be positive"
            )
        if problems:
            raise ValueError("leader election: " + "; ".join(problems))
        self.kube = kube
        self.namespace = namespace
        self.name = name
        self.identity = identity
        self.lease_duration = lease_duration
        self.renew_deadline = renew_deadline
        self.retry_period = retry_period
        self.clock = clock
        self.monotonic = monotonic
        self.sleep = sleep
        self.holder: str | None = None  # who holds the Lease, as last read
        self._leading = False
        self._renewed_at = 0.0  # monotonic: the start of the last successful renewal
        self.observed = Observed()
        self._stop = asyncio.Event()

    def is_leader(self) -> bool:
        """True while this replica holds the Lease and renewed it within the renew
        deadline. A plain check, cheap enough to call before every write."""
        return self._leading and self.monotonic() - self._renewed_at <= self.renew_deadline

    def stop(self) -> None:
        """Ask ``run`` to step down, release the Lease and return."""
        self._stop.set()

    async def run(
        self,
        on_started_leading: Callable[[], Coroutine[Any, Any, None]],
        on_stopped_leading: Callable[[], Awaitable[None]] | None = None,
    ) -> None:
        """Campaign until elected, run ``on_started_leading()`` as a task while
        leading (cancelled when the lease is lost), call ``on_stopped_leading()``
        after each term, and campaign again. Returns after ``stop()``; on
        cancellation it releases the Lease too. An exception raised by
        ``on_started_leading`` ends the term and is raised from here."""
        try:
            while not self._stop.is_set():
                if not await self._campaign():
                    return
                await self._lead(on_started_leading, on_stopped_leading)
        finally:
            await asyncio.shield(self._release())

    # -- the terms

    async def _campaign(self) -> bool:
        """Retry until this replica holds the Lease (True) or is stopped (False)."""
        while not self._stop.is_set():
            if await self._try_acquire_or_renew() is True:
                self._leading = True
                log.info(
                    "leader election: %s leads (lease %s/%s)",
                    self.identity,
                    self.namespace,
                    self.name,
                )
                return True
            await self._pause(self.retry_period)
        return False

    async def _lead(
        self,
        on_started_leading: Callable[[], Coroutine[Any, Any, None]],
        on_stopped_leading: Callable[[], Awaitable[None]] | None,
    ) -> None:
        work = asyncio.create_task(on_started_leading(), name="leader-work")
        try:
            while not self._stop.is_set() and self.is_leader():
                await self._pause(self.retry_period, also=work)
                if work.done() and not work.cancelled() and work.exception() is not None:
                    break
                if self._stop.is_set() or not self.is_leader():
                    # The renew deadline passed while this replica waited: it has
                    # stopped leading, and a renewal now would start a new term
                    # without the old one ever ending (client-go steps down here).
                    break
                held = await self._try_acquire_or_renew()
                if held is False:  # another replica holds a valid Lease: step down now
                    break
            if not self._stop.is_set() and not self.is_leader():
                log.warning(
                    "leader election: %s lost the lease (holder now %s); stops acting",
                    self.identity,
                    self.holder,
                )
        finally:
            self._leading = False
            if not work.done():
                work.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await work
            if on_stopped_leading is not None:
                await on_stopped_leading()
        if work.done() and not work.cancelled() and (error := work.exception()) is not None:
            raise error

    async def _pause(self, seconds: float, also: asyncio.Task[None] | None = None) -> None:
        """Sleep (through the injected ``sleep``) unless stopped first, or ``also``
        finishes first."""
        sleeper = asyncio.ensure_future(self.sleep(seconds))
        stopper = asyncio.ensure_future(self._stop.wait())
        waiting: set[asyncio.Future[Any]] = {sleeper, stopper}
        if also is not None:
            waiting.add(also)
        try:
            await asyncio.wait(waiting, return_when=asyncio.FIRST_COMPLETED)
        finally:
            for f in (sleeper, stopper):
                f.cancel()

    # -- the Lease

    def _bounded(self) -> float:
        """How long one attempt may take: what is left before the renew deadline
        while leading, a renew deadline while campaigning."""
        if self._leading:
            return max(self.renew_deadline - (self.monotonic() - self._renewed_at), 0.01)
        return self.renew_deadline

    async def _try_acquire_or_renew(self) -> bool | None:
        """True: this replica holds the Lease now. False: another one holds it.
        None: unknown (a conflict, an error or a timeout); try again."""
        try:
            return await asyncio.wait_for(self._acquire_or_renew(), timeout=self._bounded())
        except Conflict:
            log.info("leader election: %s lost a race for the lease", self.identity)
        except (KubeError, TimeoutError) as e:
            log.warning(
                "leader election: %s could not reach the lease: %s",
                self.identity,
                e or type(e).__name__,
            )
        return None

    async def _acquire_or_renew(self) -> bool:
        # Taken before the read: the renewal counts from before the write landed,
        # never later than any standby can have seen it.
        started = self.monotonic()
        now = self.clock()
        try:
            lease = await self.kube.get_lease(self.namespace, self.name)
        except NotFound:
            spec = self._spec(now, acquired=now, transitions=0)
            body: Obj = {
                "apiVersion": LEASE_API_VERSION,
                "kind": "Lease",
                "metadata": {"name": self.name, "namespace": self.namespace},
                "spec": spec,
            }
            created = await self.kube.create_lease(self.namespace, body)
            return self._renewed(started, created or body)
        current: Obj = lease.get("spec") or {}
        self.observed.see(lease, self.monotonic())
        holder = current.get("holderIdentity") or None
        self.holder = holder
        if (
            holder is not None
            and holder != self.identity
            and not self.observed.expired(self.monotonic())
        ):
            return False
        transitions = int(current.get("leaseTransitions") or 0)
        if holder == self.identity:
            acquired = parse_time(current.get("acquireTime")) or now
        else:
            acquired, transitions = now, transitions + 1
        spec = self._spec(now, acquired=acquired, transitions=transitions)
        lease["spec"] = spec
        replaced = await self.kube.replace_lease(self.namespace, self.name, lease)
        return self._renewed(started, replaced or lease)

    def _renewed(self, started: float, lease: Obj) -> bool:
        self._renewed_at = started
        self.holder = self.identity
        self.observed.see(lease, self.monotonic())
        return True

    def _spec(self, now: float, *, acquired: float, transitions: int) -> Obj:
        return {
            "holderIdentity": self.identity,
            "leaseDurationSeconds": max(1, round(self.lease_duration)),
            "acquireTime": micro_time(acquired),
            "renewTime": micro_time(now),
            "leaseTransitions": transitions,
        }

    async def _release(self) -> None:
        """Clear the holder if it is us, so that another replica need not wait for
        the Lease to expire. Best effort: an unreachable server lets it expire."""
        self._leading = False
        if self.holder != self.identity:
            return  # never held, or already lost: nothing to give back
        try:
            await asyncio.wait_for(self._release_once(), timeout=self.renew_deadline)
        except (KubeError, TimeoutError) as e:
            log.warning(
                "leader election: %s could not release the lease: %s",
                self.identity,
                e or type(e).__name__,
            )

    async def _release_once(self) -> None:
        try:
            lease = await self.kube.get_lease(self.namespace, self.name)
        except NotFound:
            return
        spec: Obj = dict(lease.get("spec") or {})
        if spec.get("holderIdentity") != self.identity:
            return
        now = self.clock()
        spec.pop("holderIdentity", None)
        spec.update(leaseDurationSeconds=1, renewTime=micro_time(now), acquireTime=micro_time(now))
        lease["spec"] = spec
        await self.kube.replace_lease(self.namespace, self.name, lease)
        self.holder = None
        log.info("leader election: %s released the lease", self.identity)


Work = Callable[[], Coroutine[Any, Any, None]]


class ElectionThread:
    """Runs a ``LeaderElector`` in a thread with its own event loop (module
    docstring), and brings its terms to the loop that called ``start``.

    The elector must be used by this thread alone once started (its ``stop`` too:
    ``stop`` here hands it over); ``is_leader()`` may be called from anywhere."""

    def __init__(self, elector: LeaderElector) -> None:
        self.elector = elector
        self._loop: asyncio.AbstractEventLoop | None = None  # the election thread's
        self._thread = threading.Thread(target=self._campaign, name="leader-election", daemon=True)
        self._home: asyncio.AbstractEventLoop | None = None
        # True: a term began; False: it ended; None: the election thread ended.
        self._terms: asyncio.Queue[bool | None] = asyncio.Queue()
        self._follower: asyncio.Task[None] | None = None
        self.error: BaseException | None = None

    def is_leader(self) -> bool:
        return self.elector.is_leader()

    def start(self, on_started_leading: Work, on_stopped_leading: Work | None = None) -> None:
        """Starts campaigning; the terms' work runs on the calling loop."""
        self._home = asyncio.get_running_loop()
        self._loop = asyncio.new_event_loop()  # run, and closed, by the thread
        self._follower = asyncio.create_task(
            self._follow(on_started_leading, on_stopped_leading), name="leader-terms"
        )
        self._thread.start()

    async def stop(self, timeout: float) -> None:
        """Steps down, releases the Lease and waits (at most ``timeout`` seconds)
        for the thread and the last term's ``on_stopped_leading``."""
        self._stop_thread()
        if self._follower is None:
            return
        try:
            await asyncio.wait_for(asyncio.shield(self._follower), timeout)
        except TimeoutError:
            log.warning("leader election did not stop within %gs", timeout)
            self._follower.cancel()

    # -- the election thread

    def _campaign(self) -> None:
        loop = self._loop
        assert loop is not None  # start() made it before starting the thread
        asyncio.set_event_loop(loop)
        try:
            loop.run_until_complete(self.elector.run(self._hold))
        except Exception as e:  # on a thread: nobody else would see it
            log.error("leader election stopped: %s", e, exc_info=e)
            self.error = e
        finally:
            with contextlib.suppress(Exception):
                loop.run_until_complete(loop.shutdown_default_executor())
            loop.close()
            self._tell(None)

    async def _hold(self) -> None:
        """The elector's work for a term, on the election thread: tell the home
        loop when the term begins and ends."""
        self._tell(True)
        try:
            await asyncio.Event().wait()  # until the elector cancels it
        finally:
            self._tell(False)

    def _tell(self, term: bool | None) -> None:
        if self._home is not None and not self._home.is_closed():
            with contextlib.suppress(RuntimeError):  # the home loop closed meanwhile
                self._home.call_soon_threadsafe(self._terms.put_nowait, term)

    # -- the home loop

    async def _follow(self, on_started: Work, on_stopped: Work | None) -> None:
        """Runs each term's work on this loop, in the order the terms came."""
        work: asyncio.Task[None] | None = None
        try:
            while (term := await self._terms.get()) is not None:
                if term and work is None:
                    work = asyncio.create_task(on_started(), name="leader-work")
                    work.add_done_callback(self._work_done)
                elif not term and work is not None:
                    await self._end_term(work, on_stopped)
                    work = None
        finally:
            if work is not None:
                await self._end_term(work, on_stopped)

    async def _end_term(self, work: asyncio.Task[None], on_stopped: Work | None) -> None:
        work.cancel()
        await asyncio.gather(work, return_exceptions=True)
        if on_stopped is not None:
            await on_stopped()

    def _work_done(self, work: asyncio.Task[None]) -> None:
        if work.cancelled() or work.exception() is None:
            return
        error = work.exception()
        log.error(
            "leader election: the leader's work failed (%s); stepping down for good",
            error,
            exc_info=error,
        )
        self.error = error
        self._stop_thread()

    def _stop_thread(self) -> None:
        """Hands ``elector.stop`` to the election thread, which alone uses it."""
        if self._loop is not None and self._thread.is_alive():
            with contextlib.suppress(RuntimeError):  # its loop closed just now
                self._loop.call_soon_threadsafe(self.elector.stop)


__all__ = [
    "ElectionThread",
    "LeaderElector",
    "Observed",
    "lease_record",
    "micro_time",
    "parse_time",
]
