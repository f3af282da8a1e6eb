"""The rhythm learner itself (``rhythm.py`` says what it learns and why): what it
holds about each job, how one look steps a job, and the figures it publishes.

Why a module of its own: ``rhythm.py`` asks the source and hands the answers
over; this is the state machine they feed, with the jobs' clocks in a table
(``rhythm_table.py``) so that the many busy, steady jobs of a cycle move at once
and only the rest are stepped one by one (``Rhythm._step_all``).
"""

from __future__ import annotations

import itertools
import math
import statistics
from collections import deque
from dataclasses import dataclass, field

import numpy as np

from autoscaler.metrics import GANG_RHYTHM, JOB_RHYTHM, Row
from autoscaler.promql.store import SeriesStore
from autoscaler.promql.symbols import F64, I64, Mask, Symbols
from autoscaler.rhythm_join import DeviceJoin, JobGroups
from autoscaler.rhythm_table import Answer, JobKey, Mapped, Table

# The stall rules' idle: every device of the job at or under this.
IDLE = 0.05
# Pauses are remembered this long (the longest is "in the last 6 hours").
HORIZON = 6 * 3600.0
# At most this many pauses per job (6 hours of checkpoints every 15 minutes).
MAX_PAUSES = 24
# At most this many jobs learned (16,384 devices in one-device pods is the most
# the benchmark fleet holds; beyond it new jobs keep the conservative rules).
MAX_JOBS = 20_000
# A job not seen for this long is forgotten: as long as its pauses are kept (a
# gang requeued after a fault may wait hours for its nodes, and is the same run).
FORGET = HORIZON
# A dip longer than this is no checkpoint: not learned.
MAX_PAUSE = 3600.0
# What a checkpoint's write or read moves at the least, bytes/s a node (the
# rules' ``> 1e7`` on ``_pause_io_min_bytes_per_second``).
MOVING = 1e7
# A dip's end is confirmed by a busy look at most this long after it.
CONFIRM = 600.0
# A youngest pod younger than before by more than this is a restart (ages are
# read from a series stamped once per cycle: a minute of jitter is no restart).
RESTART_SLACK = 90.0


# A recovered pause: (start, length, epoch, the least its nodes moved or None).
Pause = tuple[float, float, int, float | None]


@dataclass
class _Job:
    """What the learner holds about one job. Its clocks and ``busy_seen`` live in
    its slot of the table (``rhythm_table.py``), which the fast path moves; they
    are read into these fields for a per-job step (``Rhythm._load``) and written
    back after it with the rest (``Rhythm._save``)."""

    key: JobKey
    slot: int
    born: float
    seen: float
    busy_seen: bool = False
    # When the current pods were first seen busy (None: not yet).
    since: float | None = None
    # When the current pods were last seen busy.
    last_busy: float | None = None
    idle_since: float | None = None
    # The dip in progress: the least its job's nodes moved at any look (None:
    # a look had no figure), and what they move now (None: unknown).
    dip_io_min: float | None = None
    io: float | None = None
    # A dip that ended at the last look: a pause once the next look, soon after,
    # finds the job busy again (one busy look between two idle ones, or before
    # the job's pods went, is no recovery).
    ending: Pause | None = None
    # (start, length, epoch, least moved or None) of recovered pauses, oldest first.
    pauses: deque[Pause] = field(default_factory=lambda: deque(maxlen=MAX_PAUSES))
    # Incremented at each restart: spacing is measured within one epoch only.
    epoch: int = 0
    # The figures of ``pauses`` (``_pause_figures``), and what they were computed
    # from: how many pauses, the first and the last (the deque only grows at its
    # end and forgets at its start, and pauses start one after another, so these
    # name its contents) and the epoch. They change only when a pause is learned
    # or forgotten, or the job restarts.
    figures: tuple[tuple[int, Pause | None, Pause | None, int], _PauseFigures] | None = None
    # The codes its rows were found by (``Rhythm._coded``), to forget with it.
    coded: list[tuple[str, int]] = field(default_factory=list)


@dataclass(frozen=True)
class JobRhythm:
    """The published figures of one job (None: not known yet)."""

    pauses: int
    longest: float | None
    spacing: float | None
    last_start: float | None
    last_end: float | None
    idle_start: float | None
    watched: float | None
    last_busy: float | None
    io: float | None = None
    pause_io_min: float | None = None


def _none(value: float) -> float | None:
    return None if math.isnan(value) else value


def _nan(value: float | None) -> float:
    return math.nan if value is None else value


class Rhythm:
    """The learner: ``observe`` once per cycle, ``rows`` (or ``write``) for the
    series. ``fast`` False steps every job one by one (the fast path's test)."""

    fast = True

    def __init__(self, max_jobs: int = MAX_JOBS) -> None:
        self.jobs: dict[JobKey, _Job] = {}
        self.max_jobs = max_jobs
        self.refused = 0
        self.now: float | None = None
        self.table = Table()
        self._by_slot: list[_Job | None] = []
        self._free: list[int] = []
        # Bumped when a job is made or forgotten: an answer's rows mapped to
        # slots (``slots``) are kept until then.
        self.generation = 0
        self._mapped: list[Mapped] = []
        # Each job's slot by the codes of its rows (per kind: namespace and name
        # codes in ``_symbols``), remembered as rows are first found by key.
        self._symbols: Symbols | None = None
        self._coded: dict[str, dict[int, int]] = {}
        # ``_coded`` per kind as sorted arrays (keys, slots), made again when it
        # changed: a cycle's rows are looked up at once, not one by one.
        self._index: dict[str, tuple[I64, I64]] = {}
        # The store the rows were last written to, the handles written then, and when.
        self._store: SeriesStore | None = None
        self._written = np.zeros(0, dtype=np.int64)
        self._written_at: float | None = None
        # The device pods' join to their devices' utilization (``rhythm_join.py``).
        self.pod_join = DeviceJoin()
        # The pods' ages grouped by pod (``rhythm_join.JobGroups``).
        self.pod_ages = JobGroups()

    def observe(
        self,
        now: float,
        util: dict[JobKey, float],
        born: dict[JobKey, float],
        io: dict[JobKey, float] | None = None,
    ) -> None:
        """One cycle's view: each job's largest utilization, youngest pod's start
        and, where known, the most that any of its nodes moved (bytes/s)."""
        self.observe_rows(now, [Answer.of("", util)], [Answer.of("", born)], io or {})

    def observe_rows(
        self, now: float, util: list[Answer], born: list[Answer], io: dict[JobKey, float]
    ) -> None:
        """``observe`` with the answers as the queries gave them (``learn``): a job
        is made, in the order of ``util``'s rows, where it has a start in ``born``."""
        self.now = now
        self._make_new(now, util, born)
        table = self.table
        u = np.full(table.size, np.nan)
        b = np.full(table.size, np.nan)
        for values, answers in ((u, util), (b, born)):
            for answer in answers:
                slots = self.slots(answer)
                ok = slots >= 0
                values[slots[ok]] = answer.values[ok]
        moved = np.full(table.size, np.nan)
        for key, value in io.items():
            job = self.jobs.get(key)
            if job is not None and math.isfinite(value):
                moved[job.slot] = value
        present = np.flatnonzero(np.isfinite(u) & np.isfinite(b))
        self._step_all(now, present, u[present] > IDLE, b[present], moved)
        f = table.floats
        for slot in np.flatnonzero(table.alive & (now - f["seen"] > FORGET)).tolist():
            self._forget(slot)

    def _make_new(self, now: float, util: list[Answer], born: list[Answer]) -> None:
        """The jobs of ``util``'s rows that have none yet and have a start."""
        unborn: dict[JobKey, float] = {}
        for answer in born:
            for row in np.flatnonzero((self.slots(answer) < 0) & answer.valid()).tolist():
                unborn[answer.key(row)] = float(answer.values[row])
        for answer in util:
            new = (self.slots(answer) < 0) & answer.valid() & np.isfinite(answer.values)
            for row in np.flatnonzero(new).tolist():
                key = answer.key(row)
                start = unborn.get(key)
                if start is None or not math.isfinite(start) or key in self.jobs:
                    continue
                if len(self.jobs) >= self.max_jobs:
                    self.refused += 1
                    continue
                self._make(key, start, now)

    def _make(self, key: JobKey, born: float, now: float) -> None:
        table = self.table
        if self._free:
            slot = self._free.pop()
        else:
            slot = len(self._by_slot)
            self._by_slot.append(None)
            table.grow(max(64, 2 * table.size) if slot >= table.size else table.size)
        table.clear(slot)
        table.alive[slot] = True
        job = self.jobs[key] = _Job(key=key, slot=slot, born=born, seen=now)
        self._by_slot[slot] = job
        self._save(job)
        self.generation += 1

    def _forget(self, slot: int) -> None:
        job = self._by_slot[slot]
        if job is not None:
            del self.jobs[job.key]
            for kind, pair in job.coded:
                coded = self._coded.get(kind, {})
                if coded.get(pair) == slot:
                    del coded[pair]
                    self._index.pop(kind, None)
        self._by_slot[slot] = None
        self.table.alive[slot] = False
        self._free.append(slot)
        self.generation += 1

    def slots(self, answer: Answer) -> I64:
        """Each row's job slot (-1: no job), read-only. Rows found by codes keep
        their mapping while the same rows come back and no job was made or
        forgotten: thousands of rows are not decoded every cycle."""
        if answer.codes is None:
            found = (self.jobs.get(k) for k in answer.all_keys())
            out = np.fromiter((-1 if j is None else j.slot for j in found), np.int64, len(answer))
            out.flags.writeable = False
            return out
        for mapped in self._mapped:
            if mapped.fits(answer, self.generation):
                return mapped.slots
        out = self._by_codes(answer)
        out.flags.writeable = False
        assert answer.symbols is not None
        kept = [m for m in self._mapped if m.generation == self.generation][-7:]
        mapped = Mapped(answer.kind, answer.symbols, answer.codes, self.generation, out)
        self._mapped = [*kept, mapped]
        return out

    def _by_codes(self, answer: Answer) -> I64:
        """Each row's slot by its codes, as far as they were seen before; the rest
        found by key (decoded) and remembered (``_coded``) until their job goes."""
        assert answer.codes is not None and answer.symbols is not None
        if answer.symbols is not self._symbols:
            self._symbols, self._coded, self._index = answer.symbols, {}, {}
        kind = answer.kind
        coded = self._coded.setdefault(kind, {})
        pairs = _pair_keys(*answer.codes)
        index = self._index.get(kind)
        if index is None:
            keys = np.fromiter(coded.keys(), np.int64, len(coded))
            slots = np.fromiter(coded.values(), np.int64, len(coded))
            order = np.argsort(keys)
            index = self._index[kind] = (keys[order], slots[order])
        keys, slots = index
        out = np.full(len(pairs), -2, dtype=np.int64)
        if keys.size:
            pos = np.minimum(np.searchsorted(keys, pairs), keys.size - 1)
            hit = keys[pos] == pairs
            out[hit] = slots[pos[hit]]
        found: dict[int, int] = {}
        for row in np.flatnonzero(out == -2).tolist():
            job = self.jobs.get(answer.key(row))
            out[row] = -1 if job is None else job.slot
            pair = int(pairs[row])
            if job is not None and pair not in coded:
                coded[pair] = found[pair] = job.slot
                job.coded.append((kind, pair))
        if found:
            # Merged into the index in order: a few new jobs do not sort it again.
            new = np.fromiter(sorted(found), np.int64, len(found))
            at = np.searchsorted(keys, new)
            new_slots = np.fromiter((found[k] for k in new.tolist()), np.int64, len(new))
            self._index[kind] = (np.insert(keys, at, new), np.insert(slots, at, new_slots))
        return out

    def _step_all(self, now: float, slots: I64, busy: Mask, born: F64, moved: F64) -> None:
        """Steps the jobs in ``slots``. A busy job that is in no dip, ends none,
        did not restart and has no pause to forget only moves its clocks (what
        ``_step`` does for it): all such at once; the rest one by one."""
        table = self.table
        f = table.floats
        fast = np.zeros(len(slots), dtype=np.bool_)
        if self.fast:
            fast = (
                busy
                & ~(born > f["born"][slots] + RESTART_SLACK)
                & ~table.ending[slots]
                & np.isnan(f["idle_since"][slots])
                & ~(now - table.oldest[slots] > HORIZON)
            )
        steady = slots[fast]
        since = f["since"][steady]
        f["seen"][steady] = now
        f["born"][steady] = born[fast]
        f["io"][steady] = moved[steady]
        f["since"][steady] = np.where(np.isnan(since), now, since)
        f["last_busy"][steady] = now
        table.busy_seen[steady] = True
        rest = ~fast
        for slot, is_busy, start in zip(
            slots[rest].tolist(), busy[rest].tolist(), born[rest].tolist(), strict=True
        ):
            job = self._by_slot[slot]
            if job is not None:
                self._load(job)
                self._step(job, now, is_busy, start, _none(float(moved[slot])))
                self._save(job)

    def _load(self, job: _Job) -> None:
        """The job's clocks and ``busy_seen`` from its slot."""
        f, s = self.table.floats, job.slot
        job.seen = float(f["seen"][s])
        job.born = float(f["born"][s])
        job.since = _none(float(f["since"][s]))
        job.last_busy = _none(float(f["last_busy"][s]))
        job.io = _none(float(f["io"][s]))
        job.busy_seen = bool(self.table.busy_seen[s])

    def _save(self, job: _Job) -> None:
        """The job into its slot: clocks, flags and its pauses' figures."""
        table, s = self.table, job.slot
        f = table.floats
        f["seen"][s] = job.seen
        f["born"][s] = job.born
        f["since"][s] = _nan(job.since)
        f["last_busy"][s] = _nan(job.last_busy)
        f["io"][s] = _nan(job.io)
        f["idle_since"][s] = _nan(job.idle_since)
        table.busy_seen[s] = job.busy_seen
        table.ending[s] = job.ending is not None
        table.oldest[s] = job.pauses[0][0] if job.pauses else math.inf
        p = _figures(job)
        table.pauses[s] = (
            float(len(job.pauses)),
            *(_nan(v) for v in (p.longest, p.spacing, p.last_start, p.last_end, p.pause_io_min)),
        )

    def _step(self, job: _Job, now: float, busy: bool, born: float, io: float | None) -> None:
        ending, job.ending = job.ending, None
        late = now - job.seen > CONFIRM
        if ending is not None and (late or born > job.born + RESTART_SLACK):
            ending = None  # unseen for long, or restarted: not known to have worked on
        job.seen = now
        if born > job.born + RESTART_SLACK:
            # New pods: their loading idle is no pause, and the phase starts over.
            job.epoch += 1
            job.busy_seen = False
            job.idle_since = None
            job.since = None
            job.last_busy = None
        job.born = born
        job.io = io if io is not None and math.isfinite(io) else None
        while job.pauses and now - job.pauses[0][0] > HORIZON:
            job.pauses.popleft()
        if not busy and not job.busy_seen and self._loading(job):
            # New pods that read a checkpoint at its pauses' pace are at work
            # already: a stall that stops the load is a dip (the I/O call's).
            job.busy_seen, job.last_busy = True, now
            job.since = job.since if job.since is not None else now
            return
        if busy:
            if ending is not None:
                job.pauses.append(ending)
            start = job.idle_since
            if start is not None and now - start <= MAX_PAUSE:
                job.ending = (start, now - start, job.epoch, job.dip_io_min)
            job.idle_since = None
            job.busy_seen = True
            if job.since is None:
                job.since = now
            job.last_busy = now
        elif job.busy_seen:
            if ending is not None:
                # Idle again at once: the dip goes on from where it began.
                job.idle_since, job.dip_io_min = ending[0], ending[3]
            first = job.idle_since is None
            if first:
                job.idle_since = now
            # One look without a figure leaves the whole dip without one.
            if job.io is None or (not first and job.dip_io_min is None):
                job.dip_io_min = None
            else:
                job.dip_io_min = job.io if first else min(job.dip_io_min or 0.0, job.io)

    @staticmethod
    def _loading(job: _Job) -> bool:
        """Its nodes move data as its pauses did (half their least or more, that
        least over ``MOVING``): a load, before its pods were ever seen busy."""
        least = _least([p[3] for p in job.pauses])
        return job.io is not None and least is not None and least > MOVING and job.io >= least / 2

    def rhythm(self, key: JobKey) -> JobRhythm | None:
        job = self.jobs.get(key)
        if job is None:
            return None
        row = self.table.figures(np.array([job.slot]))[0].tolist()
        return JobRhythm(int(row[0]), *(_none(v) for v in row[1:]))

    def _current(self) -> I64:
        """The slots of the jobs seen in the last cycle."""
        table = self.table
        if self.now is None:
            return np.zeros(0, dtype=np.int64)
        return np.flatnonzero(table.alive & (table.floats["seen"] == self.now))

    def write(self, store: SeriesStore, now: float) -> None:
        """The rows into ``store`` at ``now``, by handle (rendering them as text to
        parse back cost more than the queries), and a stale marker on each series
        written last time and not now, as a scrape's would be. Each job keeps the
        handles of its series while they are written every cycle (a store keeps a
        handle while its series has samples); one not written is taken again
        after its stale marker, and new ones are taken in key order."""
        table = self.table
        last, self._written_at = self._written_at, now
        if store is not self._store or (last is not None and now - last >= store.retention / 2):
            # Another store, or one that may have dropped what was written last
            # (a learner that stood by for half the retention): no handle held.
            self._store, self._written = store, np.zeros(0, dtype=np.int64)
            table.handles.fill(-1)
        current = self._current()
        values = table.figures(current)
        have = ~np.isnan(values)
        handles = table.handles[current]
        handles[~have] = -1
        rows, cols = np.nonzero(have & (handles < 0))
        if rows.size:
            jobs = [self._by_slot[s] for s in current[rows].tolist()]
            needed = sorted(
                (job.key, col, row)
                for job, col, row in zip(jobs, cols.tolist(), rows.tolist(), strict=True)
                if job is not None
            )
            for (kind, namespace, name), col, row in needed:
                metric = (GANG_RHYTHM if kind == "gang" else JOB_RHYTHM)[col]
                labels = {"__name__": metric.name, "namespace": namespace, kind: name}
                handles[row, col] = store.ref(labels)
        table.handles.fill(-1)
        table.handles[current] = handles
        # Column by column: each column is one family, so the store finds its
        # families in runs instead of sorting the series of every job apart.
        written = handles.T[have.T]
        store.append(written, now, values.T[have.T])
        gone = _left_out(self._written, written)
        if gone.size:
            store.append_stale(gone, now)
        self._written = written

    def rows(self) -> list[Row]:
        """The series of the jobs seen in the last cycle (module docstring), in key
        order: a job that went has none, at once."""
        current = self._current()
        values = self.table.figures(current).tolist()
        jobs = [self._by_slot[s] for s in current.tolist()]
        out: list[Row] = []
        for job, figures in sorted(
            ((j, v) for j, v in zip(jobs, values, strict=True) if j is not None),
            key=lambda jv: jv[0].key,
        ):
            kind, namespace, name = job.key
            labels = {"namespace": namespace, kind: name}
            metrics = GANG_RHYTHM if kind == "gang" else JOB_RHYTHM
            for metric, value in zip(metrics, figures, strict=True):
                if not math.isnan(value):
                    out.append((metric, dict(labels), value))
        return out


def _pair_keys(namespace: I64, name: I64) -> I64:
    """One integer per (namespace, name) code pair (codes are symbol numbers, far
    below 2**31: a store holds fewer distinct label values than that)."""
    out: I64 = (namespace.astype(np.int64) << 32) | name.astype(np.int64)
    return out


def _left_out(before: I64, now: I64) -> I64:
    """The handles in ``before`` that are not in ``now`` (handles are small
    integers: a mask indexed by handle, not the sort of ``np.setdiff1d``)."""
    if not before.size:
        return before
    marked = np.zeros(int(max(before.max(), now.max(initial=0))) + 1, dtype=np.bool_)
    marked[now] = True
    gone: I64 = before[~marked[before]]
    return gone


def _figures(job: _Job) -> _PauseFigures:
    """The figures of a job's recovered pauses, computed again only when they may
    have changed (a pause learned or forgotten, a restart)."""
    p = job.pauses
    key = (len(p), p[0] if p else None, p[-1] if p else None, job.epoch)
    if job.figures is None or job.figures[0] != key:
        job.figures = (key, _pause_figures(tuple(p), job.epoch))
    return job.figures[1]


@dataclass(frozen=True)
class _PauseFigures:
    """What a job's recovered pauses say (``JobRhythm``'s fields of the same names)."""

    longest: float | None
    spacing: float | None
    last_start: float | None
    last_end: float | None
    pause_io_min: float | None


def _pause_figures(pauses: tuple[Pause, ...], epoch: int) -> _PauseFigures:
    mine = [p for p in pauses if p[2] == epoch]
    gaps = [b[0] - a[0] for a, b in itertools.pairwise(mine)]
    last = mine[-1] if mine else None
    return _PauseFigures(
        longest=max(p[1] for p in pauses) if pauses else None,
        spacing=statistics.median(gaps) if gaps else None,
        last_start=last[0] if last else None,
        last_end=last[0] + last[1] if last else None,
        pause_io_min=_least([p[3] for p in pauses]),
    )


def _least(values: list[float | None]) -> float | None:
    """The least of the pauses' figures; none unless every pause had one."""
    if not values or any(v is None for v in values):
        return None
    return min(v for v in values if v is not None)


__all__ = [
    "CONFIRM",
    "FORGET",
    "HORIZON",
    "IDLE",
    "MAX_JOBS",
    "MAX_PAUSE",
    "MAX_PAUSES",
    "MOVING",
    "RESTART_SLACK",
    "JobRhythm",
    "Pause",
    "Rhythm",
]
