"""Polls every backend in the background and keeps the rendered exposition.

Why it is built this way:

* Each backend gets its own single-thread executor and its own loop. A vendor call
  that hangs (NVML stuck in the kernel, a wedged sysfs read) can only block that
  backend's thread; the other backends keep polling on their own schedule and the
  HTTP server, which only ever reads the cached bytes, keeps answering.
* A thread cannot be killed, so a hung call is never piled on: while a backend's
  previous call is still running, its next poll is skipped and the backend stays
  ``accel_exporter_backend_up 0``. Its devices keep their identity with
  ``accel_up 0`` rather than showing the last values as if they were fresh.
* The exposition is rendered after every backend poll and cached with its gzip
  form, so a scrape costs one dictionary lookup and a write. Only the devices whose
  reading changed are formatted, in short slices that let scrapes in between, and
  gzip runs in a thread (see ``publish``).
* The fault counters are the exporter's own: backends hand over new events, the
  poller classifies them through ``exporter.faults`` (a severity, and an action class
  raised by the driver's live verdict) and adds them up, so a counter never goes
  backwards when a device is lost and found again.
* A device loss is a fault event (code ``lost``, class ``reboot``) for every vendor,
  counted here because only the poller sees the transition: once when a device goes
  from answering (or from not yet read: a device already lost at the first poll) to
  lost, never again while it stays lost, whether its backend raised
  ``DeviceLostError`` or handed over a down reading with a ``lost`` event, and
  whether or not an Xid came first.
* Each transition is logged once, here and nowhere else: a device or backend going
  down with its reason, coming back with how long it was down. A reason that changes
  while it stays down (a lost GPU's first reading names the Xid, the next ones say
  "lost") is not a transition. A device down only because its backend is down is
  covered by the backend's line, and comes back silently with it.
* The processes a reading lists are mapped to their containers (``exporter.procmap``,
  which reads ``/proc``) in the backend's thread, right after the read, so that the
  renderer on the event loop reads no file.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import functools
import gzip
import logging
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

from accel_common.durations import format_whole
from accel_common.remedies import LOST_CODE
from exporter import faults
from exporter.backends.base import Backend
from exporter.model import (
    BackendUnavailableError,
    DeviceInfo,
    DeviceLostError,
    FaultEvent,
    Link,
    PodAssignment,
    Reading,
)
from exporter.procmap import Owner, ProcMap
from exporter.render import BackendStatus, DeviceState, reading_lines, render

log = logging.getLogger("accel_exporter.poller")

# How often a backend whose library was missing is asked to discover again, so that
# a driver loaded after the exporter started is picked up without a restart.
REDISCOVER_SECONDS = 60.0
# The repair flags of ``Reading.remapped_rows`` that are fault events when they rise:
# (event code, remapped_rows key). The catalogue grades them (a pending repair is
# reset_when_idle, a failed one isolate).
REPAIR_FLAGS: tuple[tuple[str, str], ...] = (
    ("remap_pending", "pending"),
    ("remap_failure", "failure"),
)
# Devices formatted per slice of the event loop before it yields to scrapes.
FORMAT_SLICE = 8


@dataclass
class PollResult:
    devices: list[DeviceInfo]
    readings: dict[str, Reading]
    links: list[Link]
    pods: list[PodAssignment]
    duration: float
    # device -> pid -> owner, for the readings that list processes
    owners: dict[str, dict[int, Owner]] = field(default_factory=dict)


@dataclass
class Snapshot:
    """The bytes a scrape returns, rendered once per poll."""

    text: bytes
    gzipped: bytes
    rendered_at: float


@dataclass
class _BackendState:
    backend: Backend
    executor: concurrent.futures.ThreadPoolExecutor
    discovered: bool = False
    # Discovering again because the backend's partition layout changed.
    relayout: bool = False
    next_discover: float = 0.0
    up: bool = False
    reason: str = ""
    in_flight: concurrent.futures.Future[PollResult] | None = None
    duration: float | None = None
    last_success: float | None = None
    devices: list[DeviceInfo] = field(default_factory=list)
    links: list[Link] = field(default_factory=list)
    pods: list[PodAssignment] = field(default_factory=list)
    # Devices already said to be duplicates of another backend's, said once.
    logged: set[tuple[str, str]] = field(default_factory=set)
    # When the backend went down (clock time); None while up or before its first poll.
    down_since: float | None = None


@dataclass
class _Down:
    """A device that is down: since when, and whether its own line said so (not when
    only its backend is down)."""

    since: float
    logged: bool


def _for(seconds: float) -> str:
    """A time down, in the duration grammar (``1m30s``; ``0s`` under a second)."""
    return format_whole(int(max(seconds, 0.0)) * 1000)


class Poller:
    def __init__(
        self,
        backends: Sequence[Backend],
        interval: float,
        timeout: float,
        clock: Callable[[], float] = time.time,
        pod_labels: bool = False,
        procmap: ProcMap | None = None,
        catalogue: faults.Catalogue = faults.BUILTIN,
    ) -> None:
        self.interval = interval
        # The fault tables: the built-in ones, or an operator's laid over them
        # (--fault-table).
        self.catalogue = catalogue
        # Maps the processes on a device to their containers; None: a ProcMap over
        # /proc and /var/log, the host's own.
        self.procmap = procmap if procmap is not None else ProcMap()
        # --pod-labels: the renderer adds namespace and pod to the devices' gauges.
        self.pod_labels = pod_labels
        self.timeout = timeout
        self.clock = clock
        self._states = [
            _BackendState(
                b,
                concurrent.futures.ThreadPoolExecutor(1, thread_name_prefix=f"poll-{b.name}"),
            )
            for b in backends
        ]
        self._devices: dict[str, DeviceState] = {}
        self._owner: dict[str, str] = {}
        self._down: dict[str, _Down] = {}
        # Devices whose loss has been counted; a device leaves when it answers again.
        self._lost: set[str] = set()
        # device -> the repair flags it showed at its last reading (``REPAIR_FLAGS``).
        self._flags: dict[str, frozenset[str]] = {}
        self._tasks: list[asyncio.Task[None]] = []
        self._publish_lock = asyncio.Lock()
        # Set once the first poll of every backend has ended (each within its
        # timeout): until then the snapshot holds no device, and a scrape waits.
        self.first_poll = asyncio.Event()
        self.snapshot = Snapshot(b"", gzip.compress(b""), 0.0)
        self.render()

    # -- one backend poll -------------------------------------------------------

    def _poll_sync(self, st: _BackendState) -> PollResult:
        """Runs in the backend's own thread."""
        start = time.perf_counter()
        b = st.backend
        # A partition layout changed (docs/agent.md): the new devices, this poll.
        if st.discovered and b.layout_changed():
            st.discovered, st.relayout = False, True
        if not st.discovered:
            devices = b.discover()
            links = b.topology()
        else:
            devices, links = st.devices, st.links
        readings: dict[str, Reading] = {}
        for d in devices:
            try:
                readings[d.device] = b.read(d)
            except DeviceLostError as e:
                readings[d.device] = Reading(
                    up=False,
                    down_reason=f"device lost: {e}",
                    fault_events=[FaultEvent(LOST_CODE, str(e))],
                )
            except Exception as e:  # one device's failure is that device's, not ours
                readings[d.device] = Reading(up=False, down_reason=f"{type(e).__name__}: {e}")
        pods = b.pods()
        owners: dict[str, dict[int, Owner]] = {}
        for name, r in readings.items():
            if r.processes_listed and r.processes:
                pids = [p.pid for p in r.processes]
                known = b.process_owners(pids)
                owners[name] = dict(known) if known is not None else self.procmap.owners(pids)
        return PollResult(devices, readings, links, pods, time.perf_counter() - start, owners)

    async def poll_backend(self, st: _BackendState) -> None:
        name = st.backend.name
        if st.in_flight is not None:
            # Cleared only once its outcome has been taken in (``_late``).
            self._set_down(st, f"previous poll still running after {self.timeout:g}s (hung)")
            return
        if not st.discovered and self.clock() < st.next_discover:
            return
        fut = st.executor.submit(self._poll_sync, st)
        st.in_flight = fut
        waiter = asyncio.wrap_future(fut)
        try:
            # asyncio.timeout, not wait_for: Python 3.11's wait_for returns the result
            # and drops a cancel that lands as the poll completes, and the poller's
            # stop() then waits forever (the exporter hung on SIGTERM).
            async with asyncio.timeout(self.timeout):
                result = await asyncio.shield(waiter)
        except TimeoutError:
            # The thread cannot be stopped; its outcome is taken in when it ends.
            waiter.add_done_callback(functools.partial(self._late, st))
            self._set_down(st, f"poll timed out after {self.timeout:g}s")
            return
        except asyncio.CancelledError:
            waiter.add_done_callback(functools.partial(self._late, st))
            raise
        except Exception as e:
            st.in_flight = None
            self._failed(st, e)
            return
        st.in_flight = None
        if st.down_since is not None:
            down_for = _for(self.clock() - st.down_since)
            log.info(
                "backend %s is up with %d devices after %s down",
                name,
                len(result.devices),
                down_for,
            )
        elif not st.up:
            log.info("backend %s is up with %d devices", name, len(result.devices))
        # After the backend's line, so that its devices' own lines follow it.
        self._apply(st, result)
        st.up, st.reason, st.down_since = True, "", None

    def _failed(self, st: _BackendState, error: Exception) -> None:
        """A poll that raised outside ``read``: the backend is down."""
        if isinstance(error, BackendUnavailableError):
            retry = REDISCOVER_SECONDS if error.retry_seconds is None else error.retry_seconds
            st.next_discover = self.clock() + retry
            self._set_down(st, str(error), level=logging.INFO)
            return
        # A backend that raises outside read() (discover, topology) is down, and
        # asked to discover again on the next poll in case the library recovers.
        st.discovered = False
        self._set_down(st, f"{type(error).__name__}: {error}")

    def _late(self, st: _BackendState, waiter: asyncio.Future[PollResult]) -> None:
        """The outcome of a poll that outlived its timeout (issue 29). Taken in here,
        on the loop, as soon as the thread ends: left alone, asyncio logs "Future
        exception was never retrieved" for each such poll, and a backend that said it
        is unavailable would be asked to discover again on the next poll instead of
        after its back-off (on a loaded host, a discovery subprocess on every poll).
        A late success keeps only its discovery: its readings are as old as the
        timeout, and the backend stays down until a poll answers in time, which is
        now quicker since it only reads."""
        st.in_flight = None
        if waiter.cancelled():
            return
        error = waiter.exception()
        if isinstance(error, Exception):
            self._failed(st, error)
        elif error is None and not st.discovered:
            self._discovered(st, waiter.result())

    def _set_down(self, st: _BackendState, reason: str, level: int = logging.WARNING) -> None:
        now = self.clock()
        if st.down_since is None:
            st.down_since = now
            log.log(level, "backend %s is down: %s", st.backend.name, reason)
        elif reason != st.reason:
            log.debug("backend %s is still down, now: %s", st.backend.name, reason)
        st.up, st.reason = False, reason
        st.pods = []
        for d in st.devices:
            ds = self._devices.get(d.device)
            if ds is not None:
                ds.reading = Reading(up=False, down_reason=f"backend {st.backend.name}: {reason}")
                ds.lines = None
                # The backend's line says it; this device's own line waits for a
                # reason of its own.
                self._down.setdefault(d.device, _Down(now, logged=False))

    def _transition(self, device: str, reading: Reading) -> None:
        """Logs ``device``'s change of state, if this reading is one."""
        down = self._down.get(device)
        if not reading.up:
            if down is None:
                down = self._down[device] = _Down(self.clock(), logged=False)
            if not down.logged:
                down.logged = True
                log.warning("device %s is down: %s", device, reading.down_reason)
            return
        if down is None:
            return
        del self._down[device]
        if down.logged:
            log.info("device %s is up again after %s down", device, _for(self.clock() - down.since))

    def _discovered(self, st: _BackendState, result: PollResult) -> list[DeviceInfo]:
        """The devices of ``result`` that this backend owns (a device another backend
        already exports is a duplicate, said once), taken as the backend's devices
        when the poll discovered."""
        name = st.backend.name
        kept: list[DeviceInfo] = []
        for d in result.devices:
            owner = self._owner.setdefault(d.device, name)
            if owner != name:
                key = (d.device, "duplicate")
                if key not in st.logged:
                    st.logged.add(key)
                    log.error(
                        "backend %s reports device %s, which backend %s already exports; "
                        "ignoring the duplicate",
                        name,
                        d.device,
                        owner,
                    )
                continue
            kept.append(d)
        if not st.discovered:
            if st.relayout:
                # Partitions that the new layout no longer has go; whole GPUs keep
                # their identity whatever happens to them.
                found = {d.device for d in kept}
                for d in st.devices:
                    if d.parent and d.device not in found:
                        self._devices.pop(d.device, None)
                        self._owner.pop(d.device, None)
                        self._down.pop(d.device, None)
                        self._lost.discard(d.device)
                        self._flags.pop(d.device, None)
                st.relayout = False
            st.discovered = True
            st.devices, st.links = kept, result.links
        return kept

    def _apply(self, st: _BackendState, result: PollResult) -> None:
        kept = self._discovered(st, result)
        for d in kept:
            reading = result.readings[d.device]
            ds = self._devices.get(d.device)
            if ds is None:
                ds = self._devices[d.device] = DeviceState(d, reading)
                ds.faults = dict.fromkeys(self.catalogue.pairs(d.vendor), 0)
            ds.info, ds.reading, ds.lines = d, reading, None
            ds.owners = result.owners.get(d.device, {})
            self._transition(d.device, reading)
            for ev in self._new_faults(d.device, reading):
                self._count(ds, ev)
        st.pods = result.pods
        st.duration = result.duration
        st.last_success = self.clock()

    def _new_faults(self, device: str, reading: Reading) -> list[FaultEvent]:
        """The reading's events, with a loss counted once per transition to lost: a
        ``lost`` event of a device whose loss is already counted is dropped, and a
        device that answers again can be lost (and counted) again."""
        if reading.up:
            self._lost.discard(device)
            return reading.fault_events + self._repair_events(device, reading)
        events = []
        for ev in reading.fault_events:
            if ev.code == LOST_CODE:
                if device in self._lost:
                    continue
                self._lost.add(device)
            events.append(ev)
        return events

    def _repair_events(self, device: str, reading: Reading) -> list[FaultEvent]:
        """An event for each repair flag the device raised since its last reading: a
        row remap (NVIDIA) or row replacement (Gaudi) waiting for a reset, and a remap
        that failed. The flag is a state, not an event, in every vendor library; its
        rise is the news, counted once (a flag already up at the first reading
        included), and again only after it cleared."""
        now = frozenset(
            code for code, key in REPAIR_FLAGS if reading.remapped_rows.get(key, 0.0) > 0
        )
        before = self._flags.get(device, frozenset())
        self._flags[device] = now
        return [
            FaultEvent(code, f"accel_remapped_rows {key} > 0")
            for code, key in REPAIR_FLAGS
            if code in now - before
        ]

    def _count(self, ds: DeviceState, ev: FaultEvent) -> None:
        vendor = ds.info.vendor
        sev = self.catalogue.severity(vendor, ev.code, ev.action, ev.decoded)
        action = self.catalogue.action(vendor, ev.code, ev.action, ev.decoded)
        ds.faults[(sev, action)] = ds.faults.get((sev, action), 0) + 1
        key = (ev.code, sev, action)
        ds.fault_codes[key] = ds.fault_codes.get(key, 0) + 1
        log.warning(
            "fault on %s: code=%s severity=%s action=%s %s",
            ds.info.device,
            ev.code,
            sev,
            action,
            ev.detail,
        )

    # -- rendering ---------------------------------------------------------------

    def _render_inputs(
        self,
    ) -> tuple[list[DeviceState], list[Link], list[BackendStatus], list[PodAssignment]]:
        """What the renderer reads, with the counters copied at this instant."""
        devices = [
            DeviceState(
                ds.info, ds.reading, dict(ds.faults), dict(ds.fault_codes), ds.lines, ds.owners
            )
            for ds in self._devices.values()
        ]
        links = [link for s in self._states for link in s.links]
        statuses = [
            BackendStatus(s.backend.name, s.up, s.duration, s.last_success) for s in self._states
        ]
        pods = [p for s in self._states for p in s.pods]
        return devices, links, statuses, pods

    def render(self) -> Snapshot:
        """Renders everything on the calling thread (start-up, tests)."""
        text = render(*self._render_inputs(), pod_labels=self.pod_labels)
        self.snapshot = Snapshot(text, gzip.compress(text, 6, mtime=0), self.clock())
        return self.snapshot

    async def publish(self) -> Snapshot:
        """Renders the devices whose reading changed and swaps the cached bytes in.

        The event loop that answers scrapes must never be held for long, and a
        worker thread does not help with pure-Python formatting: it holds the GIL,
        and every socket call of a scrape then waits for it again. So formatting
        runs on the loop in slices of a few devices (about 0.1 ms each), yielding
        between slices; only gzip, which releases the GIL, goes to a thread.
        """
        async with self._publish_lock:
            formatted = 0
            for ds in list(self._devices.values()):
                if ds.lines is None:
                    ds.lines = reading_lines(ds.info, ds.reading)
                    formatted += 1
                    if formatted % FORMAT_SLICE == 0:
                        await asyncio.sleep(0)
            text = render(*self._render_inputs(), pod_labels=self.pod_labels)
            # Level 6 is what most clients get from Go's default; the cost is paid
            # once per poll, not once per scrape.
            gzipped = await asyncio.to_thread(gzip.compress, text, 6, mtime=0)
            self.snapshot = Snapshot(text, gzipped, self.clock())
            return self.snapshot

    # -- lifecycle ---------------------------------------------------------------

    async def poll_once(self) -> Snapshot:
        """Polls every backend once, concurrently, each within its timeout."""
        await asyncio.gather(*(self.poll_backend(s) for s in self._states))
        snapshot = await self.publish()
        self.first_poll.set()
        return snapshot

    async def first_snapshot(self) -> Snapshot:
        """The snapshot, once the first poll has ended: a scrape that arrives while
        the exporter is starting gets every backend's first answer rather than an
        empty page. Bounded by the poll timeout (every backend's first poll ends
        within it, answered or marked down), with a second's margin."""
        if not self.first_poll.is_set():
            try:
                async with asyncio.timeout(self.timeout + 1.0):
                    await self.first_poll.wait()
            except TimeoutError:
                pass
        return self.snapshot

    async def _loop(self, st: _BackendState) -> None:
        loop = asyncio.get_running_loop()
        while True:
            start = loop.time()
            try:
                await self.poll_backend(st)
                await self.publish()
            except asyncio.CancelledError:
                raise
            except Exception:  # the poller itself must never die
                log.exception("unexpected error polling backend %s", st.backend.name)
            await asyncio.sleep(max(0.0, self.interval - (loop.time() - start)))

    async def start(self) -> None:
        """Runs a first poll of everything, then keeps each backend polling."""
        await self.poll_once()
        self._tasks = [asyncio.create_task(self._loop(s)) for s in self._states]

    async def stop(self) -> None:
        for t in self._tasks:
            t.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)
        self._tasks = []
        for s in self._states:
            # A hung thread cannot be joined; do not wait for it.
            s.executor.shutdown(wait=False, cancel_futures=True)
            try:
                s.backend.close()
            except Exception as e:
                log.debug("closing backend %s: %s", s.backend.name, e)

    @property
    def backend_up(self) -> dict[str, bool]:
        return {s.backend.name: s.up for s in self._states}
