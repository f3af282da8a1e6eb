"""A job's own rhythm, learned from its utilization: how long the idle dips it
recovers from last and how often they come, published as cluster-state series
for the stall rules (docs/rules.md, "The stall detector").

Why: a training job idles all of its devices together while it writes a
checkpoint, and a stall looks the same for as long as the checkpoint would last.
The checkpoint annotations that say how long and how often
(``accel-fleet.io/checkpoint-pause`` and friends) are written by no training
framework, so the rules learn each job's pauses from what it did instead: a dip
(every device of the job idle, the stall rules' ``<= 0.05``) that ends with the
job busy again is a *recovered pause*. Declared annotations take precedence in
the rules where present.

What is learned, per job (a gang: ``(namespace, gang)``; a device pod that is no
gang member: ``(namespace, pod)``), and published as ``accel_gang_rhythm_*``
(labels ``namespace, gang``) and ``accel_job_rhythm_*`` (``namespace, pod``):

- ``_pauses``: recovered pauses seen in the last ``HORIZON`` (6 hours);
- ``_longest_pause_seconds``: the longest of them;
- ``_spacing_seconds``: the median time between the starts of consecutive
  pauses (from two pauses on);
- ``_last_pause_start_timestamp_seconds`` / ``_last_pause_end_timestamp_seconds``;
- ``_idle_start_timestamp_seconds``: only while the job is in a dip (idle after
  having been busy): when the dip began;
- ``_watched_seconds``: how long the job's current pods have been followed since
  they were first seen busy (a job with no pause in hours of watching is a job
  that does not pause: the rules read it so);
- ``_last_busy_timestamp_seconds``: when the current pods were last seen busy
  (the rules' "worked within the last 15 minutes", read here rather than from a
  15-minute window over every device: a scrape late changes nothing at 15
  minutes);
- ``_io_bytes_per_second``: only in a dip, what the job's nodes move (the most of
  any of them, bytes/s over 2 minutes, network and disk, both directions:
  ``HOST_IO`` over node_exporter's counters), where every node has a figure;
- ``_pause_io_min_bytes_per_second``: the least the job's nodes moved at any look
  during its recovered pauses in ``HORIZON``, only when every look had a figure.
  A checkpoint writes (a restore reads), a stall moves nothing: the rules tell
  the two apart by this while both idle every device (docs/rules.md).

Every figure is measured by one instrument: each evaluation cycle asks the source
two instant queries per kind of job (gangs, other device pods): its youngest
pod's age and, where the kind has jobs, the job's largest
``max_over_time(accel_utilization_ratio[1m])`` over its devices (the stall rules'
own idle test); a dip starts at the first cycle that
sees the job idle and ends at the first that sees it busy. A pause's length and the current dip's
length are therefore measured alike (both late by the same scrape and window),
so the rules may compare them directly.

A dip is a recovered pause only once the look after its end (within ``CONFIRM``)
finds the job busy still: one busy look inside a dip does not end it, and one
before the job's pods go (a fault's remediation) teaches nothing. The host
traffic is asked only in cycles where some job is idle.

A restarted job is not a pause: the pods of a requeued gang or pod start idle
(loading a checkpoint: minutes), so the learner watches the job's youngest pod
(``accel_job_age_seconds``). A job whose pods are younger than before has
restarted: the dip in progress is dropped, nothing is learned from the idle start
of the new pods (a dip only begins after the job was seen busy), and the phase
(last pause start and end) is forgotten; the pause lengths and spacing are kept,
they are the same training run's. New pods that, before they are ever seen busy,
move data at their pauses' pace (half their least or more, that least over
``MOVING``) are loading a checkpoint: at work, so a stall that stops the load is
a dip. A dip longer than ``MAX_PAUSE`` is not learned either (a stall that ended
by itself is no checkpoint).

Where it runs: inside ``engine/cycle.py``'s ``run_cycle``, after the source's
refresh and the controller's ``prepare`` and before the rules are asked, so the
controller, the fleet simulator and the rule unit tests run this same code on
the same series. The learner's memory belongs to the engine's (``learner``):
a new ``EngineState`` (a controller restart, a new rule test) starts with no
rhythm. With a source that keeps its series in memory (``StoreBacked``: scraped
exporters, the simulator, rule tests) the rows are written into its store at
once; with Prometheus they reach the rules through the controller's
``/metrics`` (``server.py``) one scrape later. Both are fine: pause lengths and
spacing change slowly, and the rules read current idleness from their own
utilization windows (a dip's start, which is new at once, is only read beside a
window that must be idle now, and costs at most that scrape on the paths that
wait out a dip's length). A restarted controller starts a new ``EngineState``
and so a young rhythm: the rules are slower, never wider. A replica that stood
by keeps what it learned before (it learns only while it leads): a job that
restarted meanwhile is seen as restarted, one unseen for ``FORGET`` is forgotten,
and a pause that spanned the standby is learned long, which only slows the
rules (the 10-minute default bounds them).
At 16,384 devices a cycle of the learner (its queries, the host traffic in a
cycle where some job is in a dip, and about 1,000 rows written) takes about 10 ms
on the 2-core development machine from a cold start (``bench/stall_rules.py``);
its gang utilization and ages are the stall rules' own terms, which the
evaluator then hands them without computing them again (``promql/memo.py``).

Bounds: ``MAX_JOBS`` jobs (others are not learned: no series, so the rules'
conservative default applies), ``MAX_PAUSES`` pauses per job within
``HORIZON``, and a job unseen for ``FORGET`` is forgotten. A sample that is not
a finite number, or a job without an age, is not observed: missing or hostile
data gives no series, and no series only leaves the conservative rules.
"""

from __future__ import annotations

import itertools
import logging
import math
import statistics
import weakref
from collections import deque
from collections.abc import Iterable
from dataclasses import dataclass, field

import numpy as np

from autoscaler.metrics import (
    GANG_RHYTHM,
    JOB_RHYTHM,
    Row,
)
from autoscaler.promql.matchers import quote, regex_escape
from autoscaler.promql.store import SeriesStore
from autoscaler.sources.base import Source, StoreBacked
from autoscaler.types import QueryResult, Vector

log = logging.getLogger(__name__)

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

# The job's largest utilization over its devices in the last minute, per kind.
GANG_QUERY = (
    "max by (namespace, gang) (accel_gang_info * on (node) group_left () "
    "max by (node) (max_over_time(accel_utilization_ratio[1m])))"
)
# The pods that are no gang member first: on a fleet of gangs the join is empty
# and the evaluator skips its right-hand side.
POD_QUERY = (
    "max by (namespace, pod) ((accel_device_pod_info unless on (namespace, pod) accel_gang_info)"
    " * on (node, device) group_left () max_over_time(accel_utilization_ratio[1m]))"
)
# When the job's youngest pod started: now minus these ages.
GANG_AGE_QUERY = (
    "min by (namespace, gang) "
    "(accel_job_age_seconds * on (namespace, pod) group_left (gang) accel_gang_info)"
)
# The rules' own term (computed once a cycle for all), one row per pod with only
# the pod's two labels: thousands of pods are decoded each cycle.
POD_AGE_QUERY = (
    "min by (namespace, pod) (accel_job_age_seconds unless on (namespace, pod) accel_gang_info)"
)
# What each node moves, in bytes per second over the last 2 minutes (two samples
# at a 1-minute scrape), network and disk, both directions, as node_exporter
# publishes it with the node's name in ``node``. A node without all four families
# has no figure: unknown, never quiet.
_HOST_FAMILIES = (
    ("node_network_receive_bytes_total", 'device!="lo"'),
    ("node_network_transmit_bytes_total", 'device!="lo"'),
    ("node_disk_read_bytes_total", ""),
    ("node_disk_written_bytes_total", ""),
)


def _selector(name: str, *matchers: str) -> str:
    inner = ",".join(m for m in matchers if m)
    return f"{name}{{{inner}}}" if inner else name


def host_io(nodes: str = "") -> str:
    """``HOST_IO``, its selectors narrowed by the matcher ``nodes`` (``one_of``)."""
    return " + on (node) ".join(
        f"sum by (node) (rate({_selector(name, m, nodes)}[2m]))" for name, m in _HOST_FAMILIES
    )


HOST_IO = host_io()


# The most of each gang's members' nodes, for gangs whose every member's node has
# a figure (a gang with one unknown is unknown: no row), and of each device pod's
# that is no gang member. Both answer one row per job: a row per member would be
# thousands to decode each cycle.
# A member's node without a figure counts as +Inf, so its gang's maximum is +Inf:
# not finite, no figure (``_host_io``), with the node traffic computed once.
def gang_io_query(gangs: str = "", nodes: str = "") -> str:
    """``GANG_IO_QUERY`` for the gangs the matcher ``gangs`` names, their nodes'
    traffic read from the nodes ``nodes`` names (both ``one_of``; "": all)."""
    info = _selector("accel_gang_info", gangs)
    return (
        f"max by (namespace, gang) ({info} * on (node) group_left () "
        f"({host_io(nodes)} or on (node) max by (node) ({info}) * +Inf))"
    )


def pod_io_query(pods: str = "", nodes: str = "") -> str:
    """``POD_IO_QUERY`` narrowed the same way."""
    return (
        f"max by (namespace, pod) (({_selector('accel_device_pod_info', pods)} unless on "
        f"(namespace, pod) accel_gang_info) * on (node) group_left () ({host_io(nodes)}))"
    )


GANG_IO_QUERY = gang_io_query()
POD_IO_QUERY = pod_io_query()
# The nodes of the jobs in a dip, to narrow the traffic query to them.
_JOB_NODES = {
    "gang": "group by (node) (accel_gang_info{{{}}})",
    "pod": "group by (node) (accel_device_pod_info{{{}}})",
}
# The longest alternation of names one matcher may hold: four of them for the
# nodes stay well inside the evaluator's 16,384 characters per expression. More
# nodes than that in a dip at once (over 250 of them), and the traffic query
# reads every node, as it does with no dip narrowed.
MAX_ALTERNATION = 2_500


def one_of(label: str, values: Iterable[str]) -> str | None:
    """The matcher ``label=~"v1|v2|..."`` that selects exactly ``values`` (their
    regular-expression punctuation escaped), or None where there are none, one
    is empty or unprintable, or the matcher would pass ``MAX_ALTERNATION``."""
    parts = []
    for value in sorted(set(values)):
        if not value or not value.isprintable():
            return None
        parts.append(regex_escape(value))
    body = quote("|".join(parts))
    if not parts or len(body) > MAX_ALTERNATION:
        return None
    return f"{label}=~{body}"


JobKey = tuple[str, str, str]  # (kind "gang" | "pod", namespace, name)
# A recovered pause: (start, length, epoch, the least its nodes moved or None).
Pause = tuple[float, float, int, float | None]


@dataclass
class _Job:
    """What the learner holds about one job."""

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


class Rhythm:
    """The learner: ``observe`` once per cycle, ``rows`` for the series."""

    def __init__(self, max_jobs: int = MAX_JOBS) -> None:
        self.jobs: dict[JobKey, _Job] = {}
        self.max_jobs = max_jobs
        self.refused = 0
        self.now: float | None = None
        # The store the rows were last written to, each job's handles there (None:
        # not written last time), and the handles written last time.
        self._store: SeriesStore | None = None
        self._handles: dict[JobKey, list[int | None]] = {}
        self._written = np.zeros(0, dtype=np.int64)

    def observe(
        self,
        now: float,
        util: dict[JobKey, float],
        born: dict[JobKey, float],
        io: dict[JobKey, float] | None = None,
    ) -> None:
        """One cycle's view: each job's largest utilization, youngest pod's start
        and, where known, the most that any of its nodes moved (bytes/s)."""
        self.now = now
        moved = io or {}
        for key, u in util.items():
            b = born.get(key)
            if b is None or not math.isfinite(u) or not math.isfinite(b):
                continue
            job = self.jobs.get(key)
            if job is None:
                if len(self.jobs) >= self.max_jobs:
                    self.refused += 1
                    continue
                job = self.jobs[key] = _Job(born=b, seen=now)
            self._step(job, now, u > IDLE, b, moved.get(key))
        for key in [k for k, j in self.jobs.items() if now - j.seen > FORGET]:
            del self.jobs[key]

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
        values = _values(job)
        return JobRhythm(len(job.pauses), *values[1:])

    def write(self, store: SeriesStore, now: float) -> None:
        """The rows into ``store`` at ``now``, by handle (rendering them as text to
        parse back cost more than the queries), and a stale marker on each series
        written last time and not now, as a scrape's would be. Each job keeps the
        handles of its series while they are written every cycle (a store keeps a
        handle while its series has samples); one not written is taken again
        after its stale marker."""
        if store is not self._store:
            self._store, self._handles, self._written = store, {}, np.zeros(0, dtype=np.int64)
        handles: list[int] = []
        values: list[float] = []
        kept: dict[JobKey, list[int | None]] = {}
        for key, job in self._current_jobs():
            kind, namespace, name = key
            refs = kept[key] = self._handles.get(key) or [None] * len(GANG_RHYTHM)
            metrics = GANG_RHYTHM if kind == "gang" else JOB_RHYTHM
            for i, value in enumerate(_values(job)):
                if value is None:
                    refs[i] = None
                    continue
                ref = refs[i]
                if ref is None:
                    labels = {"__name__": metrics[i].name, "namespace": namespace, kind: name}
                    ref = refs[i] = store.ref(labels)
                handles.append(ref)
                values.append(value)
        written = np.array(handles, dtype=np.int64)
        store.append(written, now, np.array(values, dtype=np.float64))
        gone = np.setdiff1d(self._written, written)
        if gone.size:
            store.append_stale(gone, now)
        self._handles, self._written = kept, written

    def _current_jobs(self) -> list[tuple[JobKey, _Job]]:
        """The jobs seen in the last cycle, in key order."""
        now = self.now
        return sorted((k, j) for k, j in self.jobs.items() if j.seen == now)

    def rows(self) -> list[Row]:
        """The series of the jobs seen in the last cycle (module docstring): a job
        that went has none, at once."""
        out: list[Row] = []
        for (kind, namespace, name), job in self._current_jobs():
            labels = {"namespace": namespace, kind: name}
            metrics = GANG_RHYTHM if kind == "gang" else JOB_RHYTHM
            for metric, value in zip(metrics, _values(job), strict=True):
                if value is not None:
                    out.append((metric, dict(labels), value))
        return out


def _values(job: _Job) -> tuple[float | None, ...]:
    """A job's figures in ``_RHYTHM``'s order (``metrics.py``; None: no series),
    which ``JobRhythm`` names: ``write`` asks this of every job every cycle."""
    p = job.pauses
    key = (len(p), p[0] if p else None, p[-1] if p else None, job.epoch)
    if job.figures is None or job.figures[0] != key:
        job.figures = (key, _pause_figures(tuple(p), job.epoch))
    f = job.figures[1]
    return (
        float(len(p)),
        f.longest,
        f.spacing,
        f.last_start,
        f.last_end,
        job.idle_since,
        None if job.since is None else job.seen - job.since,
        job.last_busy,
        job.io if job.idle_since is not None else None,
        f.pause_io_min,
    )


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


# The learner of each engine memory: it lives and dies with its EngineState, so
# the controller, the simulator and the rule tests need no plumbing for it, and a
# controller restart (a new EngineState) starts with no rhythm: conservative.
_LEARNERS: dict[int, Rhythm] = {}


def learner(state: object) -> Rhythm:
    """The learner that belongs to ``state`` (made on first use)."""
    key = id(state)
    found = _LEARNERS.get(key)
    if found is None:
        found = _LEARNERS[key] = Rhythm()
        weakref.finalize(state, _LEARNERS.pop, key, None)
    return found


def rows_of(state: object) -> list[Row]:
    """The rhythm series of ``state``'s learner; none when it has none."""
    found = _LEARNERS.get(id(state))
    return found.rows() if found is not None else []


def _by_job(result: QueryResult, kind: str) -> dict[JobKey, float]:
    """Sample values by job key; anything but a vector (Unknown) is no data."""
    if not isinstance(result, Vector):
        return {}
    out: dict[JobKey, float] = {}
    for s in result.samples:
        namespace, name = s.get("namespace"), s.get(kind)
        if namespace and name:
            out[(kind, namespace, name)] = s.value
    return out


async def _io_query(source: Source, now: float, kind: str, names: set[str]) -> str | None:
    """The traffic query for the jobs of ``kind`` named ``names`` (those in a dip),
    narrowed to them and to their nodes: a dip's few nodes instead of every node's
    four rates. The whole fleet's query where the names or nodes are too many to
    name; None where the jobs' nodes cannot be read (no figure: unknown)."""
    full = GANG_IO_QUERY if kind == "gang" else POD_IO_QUERY
    jobs = one_of(kind, names)
    if jobs is None:
        return full
    found = await source.query(_JOB_NODES[kind].format(jobs), now)
    if not isinstance(found, Vector):
        return None
    nodes = one_of("node", (s.get("node") or "" for s in found.samples))
    if nodes is None:
        return full if found.samples else None
    return gang_io_query(jobs, nodes) if kind == "gang" else pod_io_query(jobs, nodes)


async def _host_io(source: Source, now: float, dipping: dict[str, set[str]]) -> dict[JobKey, float]:
    """The most that any node of each job moved (bytes/s), where known, for the
    jobs in a dip (``dipping``: names by kind). A narrowed query answers for the
    named jobs exactly what the whole fleet's would (a test holds the two equal)."""
    out: dict[JobKey, float] = {}
    for kind in ("pod", "gang"):
        if dipping.get(kind):
            query = await _io_query(source, now, kind, dipping[kind])
            if query is not None:
                out.update(_by_job(await source.query(query, now), kind))
    return {k: v for k, v in out.items() if math.isfinite(v)}


async def learn(rhythm: Rhythm, source: Source, now: float) -> None:
    """One cycle: ask the source, observe, and write the rows into its store when
    it keeps one (else the controller's /metrics carries them)."""
    util: dict[JobKey, float] = {}
    born: dict[JobKey, float] = {}
    for kind, query, ages in (
        ("gang", GANG_QUERY, GANG_AGE_QUERY),
        ("pod", POD_QUERY, POD_AGE_QUERY),
    ):
        # The ages first: a kind with no job (no pod outside a gang, on a fleet of
        # gangs) has its utilization join over every device left unasked.
        aged = _by_job(await source.query(ages, now), kind)
        if not aged:
            continue
        util.update(_by_job(await source.query(query, now), kind))
        for key, age in aged.items():
            born[key] = now - age
    # What the jobs' nodes move matters only in a dip: not asked otherwise.
    dipping: dict[str, set[str]] = {}
    for (kind, _, name), u in util.items():
        if u <= IDLE:
            dipping.setdefault(kind, set()).add(name)
    io = await _host_io(source, now, dipping) if dipping else {}
    rhythm.observe(now, util, born, io)
    if isinstance(source, StoreBacked):
        rhythm.write(source.store, now)
