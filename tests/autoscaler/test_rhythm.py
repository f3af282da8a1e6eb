"""The rhythm learner (autoscaler/rhythm.py): what it learns from a job's dips,
what it refuses to learn (a restart's loading idle, hostile samples, an endless
dip), its bounds (jobs, dips, hours, jobs that go), and that it runs from a real
store through the evaluation cycle every caller uses."""

from __future__ import annotations

import asyncio
import math

import numpy as np

from autoscaler.engine.state import EngineState
from autoscaler.rhythm import (
    FORGET,
    HORIZON,
    MAX_PAUSE,
    MAX_PAUSES,
    Rhythm,
    learn,
    learner,
    rows_of,
)
from autoscaler.sources.store import StoreSource
from autoscaler.types import QueryResult, Unknown, Vector
from tests.support.stores import stored

GANG = ("gang", "ml", "llm")
BORN = -3600.0


def feed(r: Rhythm, pattern: str, start: float = 0.0, born: float = BORN) -> float:
    """One observation a minute: 'b' busy (0.9), 'i' idle (0.01). Returns the time
    after the last one."""
    t = start
    for c in pattern:
        r.observe(t, {GANG: 0.9 if c == "b" else 0.01}, {GANG: born})
        t += 60
    return t


def by_name(r: Rhythm) -> dict[str, float]:
    return {m.name: v for m, labels, v in r.rows() if labels.get("gang") == "llm"}


def test_a_recovered_dip_is_a_pause_with_its_length_start_and_spacing() -> None:
    r = Rhythm()
    # Busy, idle for 2 evaluations, busy; 30 minutes later idle for 3, busy.
    feed(r, "b" * 10 + "ii" + "b" * 28 + "iii" + "b" * 5)
    got = by_name(r)
    assert got["accel_gang_rhythm_pauses"] == 2
    assert got["accel_gang_rhythm_longest_pause_seconds"] == 180
    assert got["accel_gang_rhythm_spacing_seconds"] == 1800
    assert got["accel_gang_rhythm_last_pause_start_timestamp_seconds"] == 40 * 60
    assert got["accel_gang_rhythm_last_pause_end_timestamp_seconds"] == 43 * 60
    assert "accel_gang_rhythm_idle_start_timestamp_seconds" not in got
    assert got["accel_gang_rhythm_last_busy_timestamp_seconds"] == 47 * 60
    assert got["accel_gang_rhythm_watched_seconds"] == 47 * 60


def test_the_dip_in_progress_is_published_and_a_job_never_seen_busy_has_none() -> None:
    r = Rhythm()
    feed(r, "iiii")  # idle from its first sight: loading, not a dip
    assert "accel_gang_rhythm_idle_start_timestamp_seconds" not in by_name(r)
    feed(r, "bbii", start=240)
    got = by_name(r)
    assert got["accel_gang_rhythm_idle_start_timestamp_seconds"] == 360
    assert got["accel_gang_rhythm_pauses"] == 0


def feed_io(r: Rhythm, pattern: str, start: float = 0.0) -> float:
    """As ``feed``, with what the job's nodes move: 'b' busy (input, 1 MB/s), 'w'
    idle and writing (2 GB/s), 'q' idle and quiet (0.3 MB/s), 'u' idle with no
    figure (a node without node_exporter's counters)."""
    t = start
    for c in pattern:
        io = {"b": 1e6, "w": 2e9, "q": 3e5}.get(c)
        r.observe(t, {GANG: 0.9 if c == "b" else 0.01}, {GANG: BORN}, {GANG: io} if io else {})
        t += 60
    return t


def test_what_the_nodes_move_in_pauses_and_in_the_dip_in_progress() -> None:
    r = Rhythm()
    t = feed_io(r, "b" * 5 + "ww" + "b" * 28 + "www" + "b" * 5)
    got = by_name(r)
    assert got["accel_gang_rhythm_pause_io_min_bytes_per_second"] == 2e9
    # Published only in a dip: busy now, no figure.
    assert "accel_gang_rhythm_io_bytes_per_second" not in got
    # A pause whose writing stops part way: its least figure is the quiet one.
    t = feed_io(r, "wq" + "b" * 3, start=t)
    assert by_name(r)["accel_gang_rhythm_pause_io_min_bytes_per_second"] == 3e5
    feed_io(r, "q", start=t)
    assert by_name(r)["accel_gang_rhythm_io_bytes_per_second"] == 3e5


def test_a_pause_with_a_look_without_figure_leaves_the_least_unknown() -> None:
    r = Rhythm()
    t = feed_io(r, "b" * 5 + "ww" + "b" * 28 + "wu" + "b" * 5)
    got = by_name(r)
    # Unknown is not quiet: no least figure at all, so the rules' I/O call is off.
    assert "accel_gang_rhythm_pause_io_min_bytes_per_second" not in got
    feed_io(r, "u", start=t)
    assert "accel_gang_rhythm_io_bytes_per_second" not in by_name(r)
    # Non-finite figures are no figure either.
    r2 = Rhythm()
    r2.observe(0, {GANG: 0.9}, {GANG: BORN}, {GANG: 1e6})
    r2.observe(60, {GANG: 0.01}, {GANG: BORN}, {GANG: math.nan})
    r2.observe(120, {GANG: 0.9}, {GANG: BORN}, {GANG: 1e6})
    assert "accel_gang_rhythm_pause_io_min_bytes_per_second" not in by_name(r2)


def test_a_dip_is_a_pause_only_once_the_job_is_seen_working_on() -> None:
    r = Rhythm()
    # One busy look inside a dip does not end it: one dip of 5 minutes.
    feed(r, "b" * 5 + "ii" + "b" + "ii" + "bb")
    got = by_name(r)
    assert got["accel_gang_rhythm_pauses"] == 1
    assert got["accel_gang_rhythm_longest_pause_seconds"] == 300
    # A dip that ends in one busy look, after which the job is not seen for an
    # hour (its pods went: a fault's remediation), teaches nothing.
    r = Rhythm()
    t = feed(r, "b" * 5 + "iii" + "b")
    feed(r, "bbb", start=t + 3600)
    assert by_name(r)["accel_gang_rhythm_pauses"] == 0


def test_new_pods_reading_a_checkpoint_are_at_work_and_stopping_the_load_is_a_dip() -> None:
    r = Rhythm()
    t = feed_io(r, "b" * 5 + "ww" + "b" * 28 + "www" + "b" * 5)
    # Restarted: the new pods idle, reading their checkpoint at the pace the
    # pauses wrote (2 GB/s), then stop with nothing moving.
    for c in "wqq":
        io = 2e9 if c == "w" else 3e5
        r.observe(t, {GANG: 0.01}, {GANG: t - 60}, {GANG: io})
        t += 60
    got = by_name(r)
    assert got["accel_gang_rhythm_idle_start_timestamp_seconds"] == t - 120
    assert got["accel_gang_rhythm_io_bytes_per_second"] == 3e5
    # Without a figure for the load (or pauses that moved little), nothing: the
    # loading idle of new pods is no dip.
    r2 = Rhythm()
    r2.observe(0, {GANG: 0.01}, {GANG: -60}, {})
    r2.observe(60, {GANG: 0.01}, {GANG: -60}, {GANG: 3e5})
    assert "accel_gang_rhythm_idle_start_timestamp_seconds" not in by_name(r2)


def test_a_restart_is_not_a_pause_and_its_loading_idle_is_not_learned() -> None:
    r = Rhythm()
    t = feed(r, "b" * 5 + "ii" + "b" * 28 + "iii" + "b" * 5)
    # Stalled, then restarted: new pods (born now) that idle 5 minutes loading.
    t = feed(r, "i" * 6, start=t)
    t = feed(r, "iiiii" + "bbb", start=t, born=t)
    got = by_name(r)
    assert got["accel_gang_rhythm_pauses"] == 2  # neither the stall nor the load
    assert got["accel_gang_rhythm_longest_pause_seconds"] == 180
    # The phase starts over with the new pods: no last pause, no spacing yet.
    assert "accel_gang_rhythm_last_pause_start_timestamp_seconds" not in got
    assert "accel_gang_rhythm_spacing_seconds" not in got
    # Busy again since the restart: watched and last busy are the new pods'.
    assert got["accel_gang_rhythm_watched_seconds"] == 120
    assert got["accel_gang_rhythm_last_busy_timestamp_seconds"] == t - 60


def test_hostile_or_missing_data_teaches_nothing() -> None:
    r = Rhythm()
    for t, u in enumerate([0.9, math.nan, 0.01, math.inf, -math.inf, 0.9, 0.9]):
        r.observe(t * 60.0, {GANG: u}, {GANG: BORN})
    # NaN and the infinities are no observation: one dip, from 120 s to 300 s
    # (a pause once the look after its end finds the job busy still).
    got = by_name(r)
    assert got["accel_gang_rhythm_pauses"] == 1
    assert got["accel_gang_rhythm_longest_pause_seconds"] == 180
    # A job without an age (or a NaN one) is not observed: no series at all.
    r.observe(400.0, {("gang", "ml", "ageless"): 0.9}, {})
    assert ("gang", "ml", "ageless") not in r.jobs
    r.observe(460.0, {GANG: 0.01}, {GANG: math.nan})
    assert r.rows() == []


def test_a_dip_past_max_pause_is_not_learned() -> None:
    r = Rhythm()
    minutes = int(MAX_PAUSE // 60) + 2
    feed(r, "bb" + "i" * minutes + "bb")
    assert by_name(r)["accel_gang_rhythm_pauses"] == 0


def test_bounds_dips_per_job_and_the_horizon() -> None:
    r = Rhythm()
    t = feed(r, ("b" * 4 + "i") * (MAX_PAUSES * 3))
    assert len(r.jobs[GANG].pauses) == MAX_PAUSES
    # Hours later (busy all along), every pause has left the horizon.
    feed(r, "b", start=t + HORIZON)
    assert by_name(r)["accel_gang_rhythm_pauses"] == 0
    assert "accel_gang_rhythm_longest_pause_seconds" not in by_name(r)


def test_bounds_jobs_and_jobs_that_go() -> None:
    r = Rhythm(max_jobs=100)
    jobs = {("pod", "ml", f"p{i}"): 0.9 for i in range(150)}
    r.observe(0.0, jobs, dict.fromkeys(jobs, BORN))
    assert len(r.jobs) == 100 and r.refused == 50
    assert len({labels["pod"] for _, labels, _ in r.rows()}) == 100
    # A cycle that sees only one job: the others have no series at once ...
    one = {("pod", "ml", "p0"): 0.9}
    r.observe(60.0, one, dict.fromkeys(one, BORN))
    assert {labels["pod"] for _, labels, _ in r.rows()} == {"p0"}
    # ... and are forgotten after FORGET, which makes room for new ones.
    r.observe(60.0 + FORGET + 60, one, dict.fromkeys(one, BORN))
    assert set(r.jobs) == {("pod", "ml", "p0")}


def _exposition(t: float, util: float) -> str:
    return (
        f'accel_utilization_ratio{{node="n1",device="nvidia0"}} {util}\n'
        'accel_gang_info{namespace="ml",pod="llm-0",node="n1",gang="llm",kind="JobSet"} 1\n'
        'accel_device_pod_info{namespace="ml",pod="llm-0",node="n1",device="nvidia0"} 1\n'
        f'accel_job_age_seconds{{namespace="ml",pod="llm-0",node="n1",job=""}} {3600 + t}\n'
        'accel_utilization_ratio{node="n2",device="nvidia0"} ' + str(util) + "\n"
        'accel_device_pod_info{namespace="ml",pod="solo",node="n2",device="nvidia0"} 1\n'
        f'accel_job_age_seconds{{namespace="ml",pod="solo",node="n2",job="solo"}} {3600 + t}\n'
    )


def test_learns_from_a_store_and_writes_the_series_back_for_the_rules() -> None:
    async def run() -> None:
        source = StoreSource()
        r = Rhythm()
        for i, c in enumerate("bbbb" + "ii" + "bbbb"):
            t = i * 60.0
            source.store.ingest_text(_exposition(t, 0.9 if c == "b" else 0.0), t, target="x")
            await learn(r, source, t)
        result = await source.query("accel_gang_rhythm_longest_pause_seconds", 540.0)
        assert isinstance(result, Vector)
        # Idle at 4m and 5m; measured as the rules' [1m] window sees it: from the
        # first evaluation whose whole minute is idle (5m) to the first busy (6m).
        assert [(s.get("gang"), s.value) for s in result.samples] == [("llm", 60.0)]
        pods = await source.query("accel_job_rhythm_pauses", 540.0)
        assert isinstance(pods, Vector)
        assert [(s.get("pod"), s.value) for s in pods.samples] == [("solo", 1.0)]

    asyncio.run(run())


def _host(t: float, nodes: dict[str, float], families: int = 4) -> str:
    """node_exporter's four byte counters per node, each growing at its rate (n3
    only the first ``families``)."""
    names = (
        'node_network_receive_bytes_total{{node="{n}",device="eth0"}}',
        'node_network_transmit_bytes_total{{node="{n}",device="eth0"}}',
        'node_disk_read_bytes_total{{node="{n}",device="nvme0n1"}}',
        'node_disk_written_bytes_total{{node="{n}",device="nvme0n1"}}',
    )
    return "".join(
        f"{name.format(n=node)} {rate * t}\n"
        for node, rate in nodes.items()
        for name in names[: families if node == "n3" else 4]
    )


def test_learns_what_the_nodes_move_from_a_store_and_a_member_without_figures_is_unknown() -> None:
    async def run() -> None:
        source = StoreSource()
        r = Rhythm()
        # A second member of the gang on n3, whose node lacks the disk counters.
        member = (
            'accel_gang_info{namespace="ml",pod="llm-1",node="n3",gang="llm",kind="JobSet"} 1\n'
        )
        for i, c in enumerate("bbbb" + "iii"):
            t = i * 60.0
            util = 0.9 if c == "b" else 0.0
            text = _exposition(t, util) + _host(t, {"n1": 5e8, "n2": 1e5, "n3": 1e5}, 3)
            source.store.ingest_text(text, t, target="x")
            await learn(r, source, t)
        # The pod on n2 is in a dip and its node moves 4 x 100 kB/s.
        pods = await source.query("accel_job_rhythm_io_bytes_per_second", 360.0)
        assert isinstance(pods, Vector)
        assert [(s.get("pod"), s.value) for s in pods.samples] == [("solo", 4e5)]
        gangs = await source.query("accel_gang_rhythm_io_bytes_per_second", 360.0)
        assert isinstance(gangs, Vector)
        assert [s.value for s in gangs.samples] == [2e9]  # the most of its members
        # A member joins on n3, whose node has three counters of four: the
        # gang has no figure.
        t = 420.0
        text = _exposition(t, 0.0) + member + _host(t, {"n1": 5e8, "n2": 1e5, "n3": 1e5}, 3)
        source.store.ingest_text(text, t, target="x")
        await learn(r, source, t)
        gangs = await source.query("accel_gang_rhythm_io_bytes_per_second", t)
        assert isinstance(gangs, Vector) and not gangs.samples

    asyncio.run(run())


def test_each_engine_memory_has_its_own_learner_and_a_new_one_is_young() -> None:
    state = EngineState()
    assert learner(state) is learner(state)
    feed(learner(state), "bbiibb")
    assert rows_of(state)
    assert rows_of(EngineState()) == []
    assert learner(EngineState()).jobs == {}


def test_the_store_holds_what_rows_says_each_cycle_as_figures_and_jobs_come_and_go() -> None:
    """``write`` keeps each job's handles between cycles: a figure that goes (the
    dip's start once the job is busy, a job that leaves) is marked stale at once,
    and one that comes back is written again."""
    from autoscaler.promql.store import SeriesStore

    store = SeriesStore(retention=math.inf)
    r = Rhythm()
    other = ("gang", "ml", "other")
    for i, c in enumerate("bbiibbbiib"):
        t = i * 60.0
        util = {GANG: 0.9 if c == "b" else 0.01}
        if i < 6:  # the other gang leaves after six cycles
            util[other] = 0.9
        r.observe(t, util, dict.fromkeys(util, BORN))
        r.write(store, t)
        want = {(m.name, tuple(sorted(labels.items()))): v for m, labels, v in r.rows()}
        assert stored(store, t) == want, f"cycle {i}"


def test_the_traffic_query_narrowed_to_the_jobs_in_a_dip_answers_as_the_whole_fleets() -> None:
    """``_host_io`` reads only the nodes of the jobs in a dip; for those jobs it
    answers what the whole fleet's query answers: gangs over several nodes, a
    gang with a member on a node short of counters (no figure), pods outside any
    gang, node names with regex punctuation, and too many names to list (the
    whole fleet's query, unnarrowed)."""
    from autoscaler import rhythm

    rng = np.random.default_rng(3)
    nodes = [f"n{i}.rack-{i % 3}" for i in range(12)]
    lines = []
    for i, node in enumerate(nodes):
        gang = f"g{i // 3}" if i < 9 else ""
        pod = f"{gang}-{i}" if gang else f"solo{i}"
        if gang:
            lines.append(
                f'accel_gang_info{{namespace="ml",pod="{pod}",node="{node}",gang="{gang}"}} 1'
            )
        lines.append(f'accel_device_pod_info{{namespace="ml",pod="{pod}",node="{node}"}} 1')
    families = [
        ('node_network_receive_bytes_total{{node="{n}",device="eth0"}}', 1.0),
        ('node_network_receive_bytes_total{{node="{n}",device="lo"}}', 1.0),
        ('node_network_transmit_bytes_total{{node="{n}",device="eth0"}}', 1.0),
        ('node_disk_read_bytes_total{{node="{n}",device="nvme0n1"}}', 1.0),
        ('node_disk_written_bytes_total{{node="{n}",device="nvme0n1"}}', 1.0),
    ]
    rates = {n: rng.uniform(1e4, 1e9, len(families)) for n in nodes}

    async def run() -> None:
        source = StoreSource()
        for t in (0.0, 60.0, 120.0):
            host = [
                f"{name.format(n=n)} {rates[n][k] * t}"
                for n in nodes
                for k, (name, _) in enumerate(families)
                if not (n == nodes[4] and "disk_read" in name)  # g1 has no figure
            ]
            source.store.ingest_text("\n".join(lines + host) + "\n", t, target="x")
        whole: dict[tuple[str, str, str], float] = {}
        for kind, query in (("gang", rhythm.GANG_IO_QUERY), ("pod", rhythm.POD_IO_QUERY)):
            whole.update(rhythm._by_job(await source.query(query, 120.0), kind))
        whole = {k: v for k, v in whole.items() if math.isfinite(v)}
        assert ("gang", "ml", "g0") in whole and ("gang", "ml", "g1") not in whole
        narrowed = await rhythm._io_query(source, 120.0, "gang", {"g0"})
        assert narrowed is not None and 'node=~"n0\\\\.rack-0|n1' in narrowed
        for dipping in (
            {"gang": {"g0"}},
            {"gang": {"g1", "g2"}, "pod": {"solo10"}},
            {"pod": {"solo9", "solo11", "nobody"}},
            {"gang": {"gone"}},
        ):
            got = await rhythm._host_io(source, 120.0, dipping)
            want = {k: v for k, v in whole.items() if k[2] in dipping.get(k[0], set())}
            assert got == want, dipping
        # Too many names for one matcher: the whole fleet's query, same figures.
        many = {f"g{i}" for i in range(3)} | {"x" * 3000}
        assert rhythm.one_of("gang", many) is None
        got = await rhythm._host_io(source, 120.0, {"gang": many})
        assert got == {k: v for k, v in whole.items() if k[0] == "gang"}
        # Where the whole fleet's query has no answer, the narrowed one is asked:
        # the same figures for the jobs in a dip, from their nodes alone.
        failing = _WholeFails(source)
        for dipping in ({"gang": {"g0"}}, {"gang": {"g1", "g2"}, "pod": {"solo10"}}):
            got = await rhythm._host_io(failing, 120.0, dipping)
            want = {k: v for k, v in whole.items() if k[2] in dipping.get(k[0], set())}
            assert got == want, dipping
            assert any("node=~" in q for q in failing.asked), failing.asked

    asyncio.run(run())


class _WholeFails(StoreSource):
    """A store source whose whole-fleet traffic queries have no answer (as when
    one job elsewhere makes them fail), and that records what it was asked."""

    def __init__(self, inner: StoreSource) -> None:
        super().__init__(inner.store)
        self.asked: list[str] = []

    async def query(self, expr: str, at: float) -> QueryResult:
        from autoscaler import rhythm

        self.asked.append(expr)
        if expr in (rhythm.GANG_IO_QUERY, rhythm.POD_IO_QUERY):
            return Unknown("the whole fleet's query failed")
        return await super().query(expr, at)
