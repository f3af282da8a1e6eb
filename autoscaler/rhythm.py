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

Every figure is measured by one instrument: each evaluation cycle asks the source,
per kind of job (gangs, other device pods), its youngest pod's age and, where the
kind has jobs, the job's largest ``max_over_time(accel_utilization_ratio[1m])``
over its devices (the stall rules' own idle test; for pods, asked as its two
sides and joined by the learner where the source gives code columns:
``rhythm_join.py``); a dip starts at the first cycle that
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
cycle where some job is in a dip, and its rows written) takes 6.6 to 8.7 ms for
121 gangs and 3.7 to 5.1 ms for 2,048 one-node pods on the 2-core development
machine from a cold start (``bench/stall_rules.py``, 2026-12-03, a busy hour).
The gangs' utilization and ages are the stall rules' own terms, which the
evaluator then hands them without computing them again (``promql/memo.py``). For
the pods, where the source keeps its series (``ColumnarSource``), the learner
asks the two sides of the join apart (each device's ``[1m]`` window, which the
rules then share, and the device pods) and joins them itself, keeping the join
while the devices and pods stay, and takes the least age per pod itself
(``rhythm_join.py``): the join of every device to its pod was most of a cycle on
a fleet of one-node jobs, and ``stalled-pod`` joins only the pods in a dip. It
reads its answers as label code columns, and keeps its jobs' clocks in arrays
(``rhythm_table.py``), so that a busy, steady job costs no Python of its own.

Bounds: ``MAX_JOBS`` jobs (others are not learned: no series, so the rules'
conservative default applies), ``MAX_PAUSES`` pauses per job within
``HORIZON``, and a job unseen for ``FORGET`` is forgotten. A sample that is not
a finite number, or a job without an age, is not observed: missing or hostile
data gives no series, and no series only leaves the conservative rules.
"""

from __future__ import annotations

import logging
import math
import weakref
from collections.abc import Iterable

import numpy as np

from autoscaler.metrics import Row
from autoscaler.promql.evaluator import Columns
from autoscaler.promql.matchers import quote, regex_escape
from autoscaler.rhythm_join import (
    DEVICE_UTIL_LABELS,
    DEVICE_UTIL_QUERY,
    POD_AGE_TERM,
    POD_DEVICES_LABELS,
    POD_DEVICES_QUERY,
)
from autoscaler.rhythm_learner import (
    CONFIRM,
    FORGET,
    HORIZON,
    IDLE,
    MAX_JOBS,
    MAX_PAUSE,
    MAX_PAUSES,
    MOVING,
    RESTART_SLACK,
    JobRhythm,
    Rhythm,
)
from autoscaler.rhythm_table import Answer, JobKey
from autoscaler.sources.base import ColumnarSource, Source, StoreBacked
from autoscaler.types import QueryResult, Vector

log = logging.getLogger(__name__)


# The job's largest utilization over its devices in the last minute, per kind.
GANG_QUERY = (
    "max by (namespace, gang) (accel_gang_info * on (node) group_left () "
    "max by (node) (max_over_time(accel_utilization_ratio[1m])))"
)
# The same for every device pod that is no gang member, as one query for a source
# that answers only vectors (Prometheus); a source that gives code columns has
# its two sides asked apart and joined by the learner (``_pod_util``), with the
# same answer. (Asked only where some pod is no gang member: ``learn``.)
POD_QUERY = (
    "max by (namespace, pod) (accel_device_pod_info * on (node, device) group_left () "
    "max_over_time(accel_utilization_ratio[1m])) unless on (namespace, pod) accel_gang_info"
)
# When the job's youngest pod started: now minus these ages.
GANG_AGE_QUERY = (
    "min by (namespace, gang) "
    "(accel_job_age_seconds * on (namespace, pod) group_left (gang) accel_gang_info)"
)
# One row per pod with only the pod's two labels: thousands of pods are decoded
# each cycle. Its term is the rules' own (``rhythm_join.POD_AGE_TERM``), which a
# source that gives code columns is asked for instead (``_pod_ages``).
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
# Every expression the learner asks (a narrowed one reads what its widest form
# does): a store that keeps each metric's history for its readers keeps these
# (``wiring.retained``).
READS = (
    GANG_QUERY,
    POD_QUERY,
    GANG_AGE_QUERY,
    POD_AGE_QUERY,
    GANG_IO_QUERY,
    POD_IO_QUERY,
    DEVICE_UTIL_QUERY,
    POD_DEVICES_QUERY,
    POD_AGE_TERM,
    *(q.format('x="y"') for q in _JOB_NODES.values()),
)
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
    jobs in a dip (``dipping``: names by kind).

    The whole fleet's query first: its text is the same every cycle, so it is
    planned once, where a query narrowed to the jobs in a dip is new text each
    cycle (on ``llama3.yaml`` 3.4 ms a cycle against 5.2). Its rows are cut to
    the names in a dip, as the narrowed query's matcher cuts them. Where it has
    no answer (one job elsewhere in the fleet makes it fail), the narrowed query
    is asked, which answers for the named jobs exactly what the whole fleet's
    would (a test holds the two equal); where the names cannot be narrowed to,
    that is the whole fleet's query again, and it is not asked twice."""
    out: dict[JobKey, float] = {}
    for kind in ("pod", "gang"):
        names = dipping.get(kind)
        if not names:
            continue
        full = GANG_IO_QUERY if kind == "gang" else POD_IO_QUERY
        whole = await source.query(full, now)
        if isinstance(whole, Vector):
            rows = _by_job(whole, kind)
            if one_of(kind, names) is not None:  # else the narrowed path asks it whole too
                rows = {k: v for k, v in rows.items() if k[2] in names}
            out.update(rows)
            continue
        query = await _io_query(source, now, kind, names)
        if query is not None and query != full:
            out.update(_by_job(await source.query(query, now), kind))
    return {k: v for k, v in out.items() if math.isfinite(v)}


async def _answer(source: Source, expr: str, now: float, kind: str) -> Answer:
    """One row per job of ``kind``: as code columns where the source gives them
    (``ColumnarSource``: no ``Sample`` per row), else as keys. A failed query
    (Unknown, or anything but a vector) is an answer with no rows: no data."""
    if isinstance(source, ColumnarSource):
        got = await source.query_columns(expr, now, ("namespace", kind))
        if isinstance(got, Columns):
            namespace, name = got.codes
            return Answer(kind, got.values, codes=(namespace, name), symbols=got.symbols)
        return Answer.of(kind, {})
    return Answer.of(kind, _by_job(await source.query(expr, now), kind))


async def _pod_util(rhythm: Rhythm, source: Source, now: float) -> Answer:
    """``POD_QUERY``'s answer: where the source gives code columns, its two sides
    asked apart and joined by the learner, the join kept while the devices and
    pods stay (``rhythm_join.py``); else the query itself."""
    if not isinstance(source, ColumnarSource):
        return await _answer(source, POD_QUERY, now, "pod")
    util = await source.query_columns(DEVICE_UTIL_QUERY, now, DEVICE_UTIL_LABELS)
    if not isinstance(util, Columns):
        return Answer.of("pod", {})
    info = await source.query_columns(POD_DEVICES_QUERY, now, POD_DEVICES_LABELS)
    if not isinstance(info, Columns):
        return Answer.of("pod", {})
    namespace, pod, values = rhythm.pod_join.per_pod(util, info)
    return Answer("pod", values, codes=(namespace, pod), symbols=util.symbols)


async def _pod_ages(rhythm: Rhythm, source: Source, now: float) -> Answer:
    """``POD_AGE_QUERY``'s answer: where the source gives code columns, its term
    asked and the least per pod taken by the learner (``rhythm_join.JobGroups``)."""
    if not isinstance(source, ColumnarSource):
        return await _answer(source, POD_AGE_QUERY, now, "pod")
    found = await source.query_columns(POD_AGE_TERM, now, ("namespace", "pod"))
    if not isinstance(found, Columns):
        return Answer.of("pod", {})
    namespace, pod, values = rhythm.pod_ages.least(found)
    return Answer("pod", values, codes=(namespace, pod), symbols=found.symbols)


async def learn(rhythm: Rhythm, source: Source, now: float) -> None:
    """One cycle: ask the source, observe, and write the rows into its store when
    it keeps one (else the controller's /metrics carries them)."""
    util: list[Answer] = []
    born: list[Answer] = []
    for kind in ("gang", "pod"):
        # The ages first: a kind with no job (no pod outside a gang, on a fleet of
        # gangs) has its utilization join over every device left unasked.
        if kind == "gang":
            aged = await _answer(source, GANG_AGE_QUERY, now, kind)
        else:
            aged = await _pod_ages(rhythm, source, now)
        if not aged.valid().any():
            continue
        if kind == "gang":
            util.append(await _answer(source, GANG_QUERY, now, kind))
        else:
            util.append(await _pod_util(rhythm, source, now))
        born.append(aged.with_values(now - aged.values))
    # What the jobs' nodes move matters only in a dip: not asked otherwise.
    dipping: dict[str, set[str]] = {}
    for answer in util:
        for row in np.flatnonzero(answer.valid() & (answer.values <= IDLE)).tolist():
            kind, _, name = answer.key(row)
            dipping.setdefault(kind, set()).add(name)
    io = await _host_io(source, now, dipping) if dipping else {}
    rhythm.observe_rows(now, util, born, io)
    if isinstance(source, StoreBacked):
        rhythm.write(source.store, now)


__all__ = [
    "CONFIRM",
    "FORGET",
    "GANG_AGE_QUERY",
    "GANG_IO_QUERY",
    "GANG_QUERY",
    "HORIZON",
    "HOST_IO",
    "IDLE",
    "MAX_ALTERNATION",
    "MAX_JOBS",
    "MAX_PAUSE",
    "MAX_PAUSES",
    "MOVING",
    "POD_AGE_QUERY",
    "POD_IO_QUERY",
    "POD_QUERY",
    "READS",
    "RESTART_SLACK",
    "JobKey",
    "JobRhythm",
    "Rhythm",
    "gang_io_query",
    "host_io",
    "learn",
    "learner",
    "one_of",
    "pod_io_query",
    "rows_of",
]
