"""Jobs as they are (issue 30): a share of them declares its checkpoints
(``workload.declares``), every gang pauses on its rhythm whether it declares or
not, the pauses vary per checkpoint (``checkpointPause: {median, sigma}``), and a
``collective_hang`` keeps every member busy while its device links and its
progress stop. Small fleets, a few simulated hours: seconds."""

from __future__ import annotations

import asyncio
import functools
import math
import statistics
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from accel_common.names import (
    CHECKPOINT_INTERVAL_ANNOTATION,
    CHECKPOINT_PAUSE_ANNOTATION,
    LAST_CHECKPOINT_ANNOTATION,
)
from autoscaler.promql.store import SeriesStore
from autoscaler.simulate import run as sim
from autoscaler.simulate.checkpoints import MAX_PAUSE_SHARE
from autoscaler.simulate.clock import EPOCH
from autoscaler.simulate.fleet import Fleet
from autoscaler.simulate.jobstate import PAUSE_UTILIZATION, Gang
from autoscaler.simulate.links import LINK_BYTES_PER_SECOND
from autoscaler.simulate.results import summary
from autoscaler.simulate.scenario import ScenarioError, load_scenario
from autoscaler.simulate.scheduler import FirstFit
from autoscaler.simulate.telemetry import LINK_RX, LINK_TX, UTIL, Telemetry
from tests.support.paths import REPO

CHECKPOINT_KEYS = {
    CHECKPOINT_INTERVAL_ANNOTATION,
    CHECKPOINT_PAUSE_ANNOTATION,
    LAST_CHECKPOINT_ANNOTATION,
}

# Seven whole-node gangs at the start, on seven nodes: each runs alone on its node.
SCENARIO = """\
apiVersion: accel-fleet/v1
kind: Scenario
spec:
  duration: DURATION
  evaluationInterval: 1m
  seed: 30
  pools:
    - {name: h100, vendor: nvidia, devicesPerNode: 8, initial: 7, min: 7, max: 7,
       provisionTime: 5m}
  workload:
    gangKind: jobset
    arrivalsPerHour: 0.01
    initialJobs: JOBS
    sizes: SIZES
    duration: {distribution: fixed, value: 20h}
    checkpointInterval: INTERVAL
    checkpointPause: PAUSE
    declares: DECLARES
    restartOverhead: 3m
    timeoutFactor: 4
    deadlineFactor: 8
FAULTS"""


def _load(tmp_path: Path, **fields: Any) -> Any:
    values = {
        "DURATION": "2h",
        "JOBS": 7,
        "SIZES": "{8: 1}",
        "INTERVAL": "20m",
        "PAUSE": "2m",
        "DECLARES": 0,
        "FAULTS": "",
    }
    values.update(fields)
    text = SCENARIO
    for key, value in values.items():
        text = text.replace(key, str(value))
    path = tmp_path / "jobs-real.yaml"
    path.write_text(text)
    return load_scenario(path)


def _hang_at(at: str, node: str, device: str) -> str:
    """A ``faults`` section with one collective hang."""
    event = f"{{at: {at}, kind: collective_hang, node: {node}, device: {device}}}"
    return f"  faults:\n    events:\n      - {event}\n"


def _run(fleet: Fleet) -> None:
    asyncio.run(fleet.run())


def _gangs(fleet: Fleet) -> list[Gang]:
    return [j for j in fleet.job_controller.job_by_index if isinstance(j, Gang)]


def _member_annotations(fleet: Fleet, g: Gang) -> list[dict[str, str]]:
    return [
        fleet.kube.pods[(g.namespace, m.pod)]["metadata"]["annotations"]
        for m in g.members
        if m.pod is not None
    ]


def test_the_declared_share_is_drawn_per_job_on_a_stream_of_its_own(tmp_path: Path) -> None:
    """600 jobs at a 25% share: about 150 declare. The draw moves nothing else:
    the same jobs, the same sizes and run times as without ``declares``."""
    runs = {}
    for share in (0, 0.25, 1):
        scenario = _load(tmp_path, DURATION="30m", JOBS=600, DECLARES=share)
        fleet = Fleet(scenario, FirstFit(), static_pools=True)
        _run(fleet)
        runs[share] = fleet
    jobs = {s: fleet.job_controller.job_by_index for s, fleet in runs.items()}
    assert len(jobs[0.25]) >= 600
    declared = sum(j.declares for j in jobs[0.25]) / len(jobs[0.25])
    assert 0.19 <= declared <= 0.31
    assert not any(j.declares for j in jobs[0]) and all(j.declares for j in jobs[1])
    drawn = {s: [(j.name, j.size, j.total, j.submitted) for j in jobs[s]] for s in jobs}
    assert drawn[0] == drawn[0.25] == drawn[1]
    # Only a declaring gang's pods carry the checkpoint annotations.
    fleet = runs[0.25]
    seen = {True: 0, False: 0}
    for g in _gangs(fleet):
        for written in _member_annotations(fleet, g):
            keys = CHECKPOINT_KEYS & written.keys()
            # A declaring gang that ran past 20m has its last checkpoint too.
            assert keys == (
                CHECKPOINT_KEYS if g.declares and g.saved_at is not None else
                {CHECKPOINT_INTERVAL_ANNOTATION, CHECKPOINT_PAUSE_ANNOTATION} if g.declares else
                set()
            )  # fmt: skip
            seen[g.declares] += 1
    assert seen[True] and seen[False]


def test_a_gang_that_declares_nothing_still_pauses_and_saves(tmp_path: Path) -> None:
    """Both gangs idle for the last 2 minutes of each 20-minute interval and save a
    checkpoint at its end; only the declaring one writes ``last-checkpoint``, and
    its ``checkpoint-pause`` says 120s."""
    found: dict[int, Any] = {}
    for share in (0, 1):
        fleet = Fleet(
            _load(tmp_path, DURATION="30m", DECLARES=share), FirstFit(), static_pools=True
        )
        probes: list[float] = []

        def probe(fleet: Fleet = fleet, probes: list[float] = probes) -> None:
            for g in _gangs(fleet):
                probes.extend(fleet.dev_util[list(g.devices)])

        # A first run has no restart overhead: the pause is from 18 to 20 minutes.
        fleet.at(EPOCH + 19 * 60.0, probe)
        _run(fleet)
        gangs = _gangs(fleet)
        assert len(gangs) == 7 and all(g.saved_at == EPOCH + 20 * 60.0 for g in gangs)
        assert probes and all(u == PAUSE_UTILIZATION for u in probes)
        found[share] = [a for g in gangs for a in _member_annotations(fleet, g)]
    assert all(not CHECKPOINT_KEYS & a.keys() for a in found[0])
    assert all(a[CHECKPOINT_PAUSE_ANNOTATION] == "120s" for a in found[1])
    assert all(a[LAST_CHECKPOINT_ANNOTATION] == "2026-01-01T00:20:00Z" for a in found[1])


def _idle_runs(samples: list[float], step: float) -> list[float]:
    """The lengths of the runs of samples at the pause's load, in seconds."""
    runs: list[float] = []
    count = 0
    for u in [*samples, 1.0]:
        if u == PAUSE_UTILIZATION:
            count += 1
        elif count:
            runs.append(count * step)
            count = 0
    return runs


def test_pauses_vary_per_checkpoint_around_the_median(tmp_path: Path) -> None:
    """A lognormal of median 2m and sigma 0.5: about 500 pauses over seven gangs,
    their median near 2 minutes, half of them above it, the log spread near 0.5;
    and each is what the gang's devices idle for."""
    pause = "{median: 2m, sigma: 0.5}"
    scenario = _load(tmp_path, DURATION="12h", INTERVAL="10m", PAUSE=pause, DECLARES=1)
    assert scenario.workload.checkpoint_pause.sigma == 0.5
    fleet = Fleet(scenario, FirstFit(), static_pools=True)
    step = 2.0
    watched: list[float] = []

    def sample() -> None:
        gangs = _gangs(fleet)
        if gangs and gangs[0].devices:
            watched.append(float(fleet.dev_util[gangs[0].devices[0]]))

    fleet.every(step, sample)
    _run(fleet)
    gangs = _gangs(fleet)
    pauses = [p for g in gangs for p in g.pauses]
    assert len(pauses) >= 450 and len(set(pauses)) == len(pauses)
    assert 105.0 <= statistics.median(pauses) <= 138.0
    assert 0.4 <= sum(p > 120.0 for p in pauses) / len(pauses) <= 0.6
    assert 0.42 <= statistics.stdev(math.log(p) for p in pauses) <= 0.58
    assert max(pauses) <= MAX_PAUSE_SHARE * 600.0
    # The first gang idled for each of its pauses (to the sampling step).
    idle = _idle_runs(watched, step)
    first = gangs[0].pauses[: len(idle)]
    assert len(idle) >= 60
    assert all(abs(a - b) <= step + 1e-6 for a, b in zip(idle, first, strict=True))
    # The declared pause is the median, whatever each pause was.
    annotations = _member_annotations(fleet, gangs[0])
    assert annotations and all(a[CHECKPOINT_PAUSE_ANNOTATION] == "120s" for a in annotations)


def test_same_seed_same_summary_with_varied_pauses(tmp_path: Path) -> None:
    pause = "{median: 2m, sigma: 0.5}"
    faults = _hang_at("50m", "h100-0001", "nvidia0")
    scenario = _load(
        tmp_path, DURATION="90m", SIZES="{16: 1}", JOBS=3, PAUSE=pause, DECLARES=0.5, FAULTS=faults
    )
    rules = [str(REPO / "rules")]
    first = summary(sim.simulate(scenario, rules, parallel=False), scenario, 30)
    second = summary(sim.simulate(scenario, rules, parallel=False), scenario, 30)
    for doc in (first, second):
        for run in ("rules", "baseline"):
            doc[run].pop("wall_seconds", None)
    assert first == second
    assert "collective_hang" in first["rules"]["time_to_remediate_seconds_by_kind"]


class _Last(SeriesStore):
    """A store that also keeps the last value appended to each series."""

    def __init__(self) -> None:
        super().__init__()
        self.last: dict[int, float] = {}

    def append(self, refs: Any, t: float, values: Any) -> int:
        self.last.update(zip(np.asarray(refs).tolist(), np.asarray(values).tolist(), strict=True))
        return super().append(refs, t, values)


LINK = "accel_link_throughput_bytes_per_second"
EXPRS = [f"accel_utilization_ratio > 0.5 unless on (node, device) {LINK} > 0"]


def _series(telemetry: Telemetry, store: _Last, k: int, devices: Any) -> list[float]:
    return [store.last[int(telemetry.refs[k, g])] for g in devices]


def test_a_collective_hang_keeps_the_gang_busy_with_its_links_and_progress_stopped(
    tmp_path: Path,
) -> None:
    """Two-node gangs; a hung collective on h100-0000's third GPU at 50m: all 16
    members stay at the gang's load, their links read 0, the gang makes no
    progress; the other gangs' links carry traffic. The fault opens no incident
    (the devices are fine) and its time to remediate runs to the end."""
    faults = _hang_at("50m", "h100-0000", "nvidia2")
    scenario = _load(tmp_path, DURATION="2h", SIZES="{16: 1}", JOBS=3, FAULTS=faults)
    fleet = Fleet(scenario, FirstFit(), static_pools=True)
    store = _Last()
    telemetry = Telemetry(fleet, store, EXPRS, seed=1)
    assert telemetry.series_on[LINK_RX] and telemetry.series_on[LINK_TX]
    seen: dict[str, Any] = {}

    def look(when: str) -> None:
        telemetry.scrape(fleet.now)
        slot = fleet.slots[fleet.machines.node_slot["h100-0000"]]
        hit = fleet.job_controller.job_by_index[int(fleet.machines.dev_job[slot.base + 2])]
        assert isinstance(hit, Gang)
        others = [g for g in _gangs(fleet) if g is not hit and g.state == "running"]
        seen[when] = {
            "gang": hit,
            "work": fleet.gangs.progress(hit),
            "util": _series(telemetry, store, UTIL, hit.devices),
            "links": _series(telemetry, store, LINK_RX, hit.devices)
            + _series(telemetry, store, LINK_TX, hit.devices),
            "others": [v for g in others for v in _series(telemetry, store, LINK_RX, g.devices)],
        }

    for minute, when in ((45, "before"), (55, "hung"), (110, "later")):
        fleet.at(EPOCH + minute * 60.0, functools.partial(look, when))
    _run(fleet)
    before, hung, later = seen["before"], seen["hung"], seen["later"]
    g = hung["gang"]
    assert g is before["gang"] and len(g.devices) == 16
    assert g.stalled and g.hung
    peak = LINK_BYTES_PER_SECOND["nvidia"]
    assert all(0.5 < u <= 1.0 for u in before["util"])
    assert all(v > 0.5 * peak * 0.5 for v in before["links"])
    # Hung: as busy as it ran (within the scrape's jitter), links silent.
    assert all(abs(u - g.utilization) <= 0.04 + 1e-9 for u in hung["util"] + later["util"])
    assert all(v == 0.0 for v in hung["links"] + later["links"])
    assert hung["others"] and all(v > 0 for v in hung["others"])
    assert later["work"] == hung["work"] < g.total
    stats = fleet.stats
    assert stats.faults.get("collective_hang") == 1
    assert sum(stats.closed_by.values()) == 0
    assert stats.remediation_by_kind["collective_hang"] == [pytest.approx(70 * 60.0)]


def test_a_single_pod_job_hangs_on_its_devices_and_a_one_device_job_sends_nothing(
    tmp_path: Path,
) -> None:
    """Without gangs: a 4-device job talks over its links until its collective
    hangs (busy, silent); a 1-device job never sends anything over them. First
    fit puts the first one-device jobs on h100-0000 and a 4-device job on
    h100-0001's first GPUs."""
    text = (
        SCENARIO.replace("    gangKind: jobset\n", "")
        .replace("DURATION", "1h")
        .replace("JOBS", "12")
        .replace("SIZES", "{1: 1, 4: 1}")
        .replace("INTERVAL", "20m")
        .replace("    checkpointPause: PAUSE\n", "")
        .replace("DECLARES", "0")
        .replace(
            "FAULTS",
            _hang_at("30m", "h100-0001", "nvidia0"),
        )
    )
    path = tmp_path / "single.yaml"
    path.write_text(text)
    fleet = Fleet(load_scenario(path), FirstFit(), static_pools=True)
    store = _Last()
    telemetry = Telemetry(fleet, store, EXPRS, seed=1)
    seen: dict[str, list[Any]] = {}

    def look(when: str) -> None:
        telemetry.scrape(fleet.now)
        seen[when] = [
            (
                j,
                _series(telemetry, store, UTIL, j.devices),
                _series(telemetry, store, LINK_RX, j.devices),
            )
            for j in fleet.job_controller.job_by_index
            if j.state == "running"
        ]

    fleet.at(EPOCH + 20 * 60.0, lambda: look("before"))
    fleet.at(EPOCH + 40 * 60.0, lambda: look("after"))
    _run(fleet)
    sizes = {j.size for j, _, _ in seen["before"]}
    assert sizes == {1, 4}
    for j, util, links in seen["before"]:
        assert all(u > 0.5 for u in util)
        assert all((v > 0) if j.size > 1 else (v == 0) for v in links)
    hung = [(j, u, v) for j, u, v in seen["after"] if j.hung]
    assert len(hung) == 1
    j, util, links = hung[0]
    assert j.size == 4 and j.stalled
    assert all(u > 0.5 for u in util) and all(v == 0 for v in links)


@pytest.mark.parametrize(
    ("field", "line", "message"),
    [
        ("declares: 1.5", 17, "declares must be a number from 0 to 1"),
        ("checkpointPause: {median: 2m}", 17, "missing"),
        (
            "checkpointPause: {median: 2m, sigma: 3}",
            17,
            "checkpointPause.sigma must be a number from 0 to 2",
        ),
        ("checkpointPause: {median: 0s, sigma: 0.5}", 17, "checkpointPause.median must be"),
        ("checkpointPause: {median: 2m, sigma: 0.5, p99: 9m}", 17, "p99"),
        (
            "checkpointPause: {median: 25m, sigma: 0.5}",
            17,
            "must be shorter than checkpointInterval",
        ),
        ("checkpointPause: 2h", 17, "checkpointPause must be"),
        ("checkpointPause: [2m]", 17, "checkpointPause"),
    ],
)
def test_bad_fields_are_placed(tmp_path: Path, field: str, line: int, message: str) -> None:
    text = SCENARIO
    for key, value in {
        "DURATION": "1h",
        "JOBS": "1",
        "SIZES": "{8: 1}",
        "INTERVAL": "20m",
        "FAULTS": "",
    }.items():
        text = text.replace(key, value)
    text = text.replace("    checkpointPause: PAUSE\n    declares: DECLARES\n", f"    {field}\n")
    path = tmp_path / "bad.yaml"
    path.write_text(text)
    with pytest.raises(ScenarioError) as e:
        load_scenario(path)
    lines = [x for x in str(e.value).splitlines() if message in x]
    assert lines, str(e.value)
    assert all(x.startswith(f"{path}:{line}:") for x in lines), str(e.value)
