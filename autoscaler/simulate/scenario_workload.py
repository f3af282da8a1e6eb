"""The ``workload`` section of a scenario: what jobs arrive, how big, how long,
where they may run, and (for gang jobs) which owner object runs them and how they
checkpoint.

Why a module of its own: the workload is the largest part of a scenario and the
one that grows with the simulator's model (gangs, checkpoint pauses), while the
fleet's pools and faults in ``scenario.py`` stay as they are; the reader here
uses ``scenario.py``'s reader and reports problems the same way.

**Gang jobs.** A job of more devices than a node has runs as a gang of whole
nodes: ``size / devicesPerNode`` member pods of ``devicesPerNode`` devices each,
placed all or nothing. ``gangKind`` picks the owner object the in-memory cluster
runs them under, as real training fleets do: ``jobset`` (a
``jobset.x-k8s.io/v1alpha2`` JobSet, one child Job per member) or ``pytorchjob``
(a ``kubeflow.org/v1`` PyTorchJob with one Master and Workers). With a
``gangKind``, every job of whole nodes (one node included) is a gang; smaller
jobs stay one-pod batch Jobs. ``initialJobs``: that many jobs are submitted at the
start (drawn like the others), so that a short scenario starts with a busy fleet.
``checkpointPause``: how long each checkpoint write idles a gang's devices (the
realistic confounder for stall detection): a duration (every pause), or
``{median: 2m, sigma: 0.5}`` (each pause drawn from a lognormal, as storage load
makes real writes vary; ``checkpoints.py``); the pause is the last part of each
``checkpointInterval`` and counts as the job's own work once the checkpoint is
saved at its end. ``declares``: the share of jobs whose pods carry the checkpoint
annotations (default 0: no training framework writes them by itself).
``backoffLimit`` is also the JobSet's ``failurePolicy.maxRestarts`` and the
PyTorchJob's ``runPolicy.backoffLimit``.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Protocol, TypeVar

from yaml.nodes import MappingNode, Node, ScalarNode, SequenceNode

from accel_common.names import VENDOR_RESOURCE
from accel_common.suggest import did_you_mean
from accel_common.yamlread import Reader
from autoscaler.placement.catalogue import DEFAULT_PRECISION, PRECISIONS
from autoscaler.simulate.limits import (
    MAX_INT32,
    MAX_NAMESPACES,
    Ask,
    WorkLimits,
    bounded,
    refuse,
)

T = TypeVar("T")
Conv = Callable[[Node, str], "T | None"]


class PoolSpec(Protocol):
    """What the workload reads of a pool (``scenario.PoolSpec``)."""

    @property
    def name(self) -> str: ...
    @property
    def vendor(self) -> str: ...


# ``eligiblePools``: the job's own pool only, or every pool of its vendor.
ELIGIBILITY = ("pool", "vendor")
DISTRIBUTIONS = ("lognormal", "exponential", "fixed")
# ``initialJobs`` at most: a backlog, not a workload of its own.
MAX_INITIAL_JOBS = 10_000
# ``gangKind``: the owner object of a gang job.
GANG_KINDS = ("jobset", "pytorchjob")
# A checkpoint pause longer than this is a typo, not a storage system.
MAX_PAUSE = 3600.0
# The widest spread of the pauses: at sigma 2 the 99th percentile is already about
# 100 times the median.
MAX_PAUSE_SIGMA = 2.0


class ScenarioReader(Reader):
    """The shared reader, plus the scenario's habit of falling back to a default:
    a missing or invalid value (already reported) reads as the default, so the
    walk goes on and every problem is found; and the work limits it checks."""

    def __init__(self, file: str, work: WorkLimits) -> None:
        super().__init__(file)
        self.work = work

    def over(self, node: Node, what: str, amount: float, limit: str, fix: str) -> bool:
        return refuse(self, self.work, Ask(node, what, amount, limit, fix))

    def bounded(self, node: Node, what: str, low: int, high: int) -> int | None:
        return bounded(self, node, what, low, high)

    def fields(
        self, node: Node, what: str, keys: Sequence[str] | None, required: Sequence[str] = ()
    ) -> dict[str, Node] | None:
        entries = self.mapping(node, what, keys, required)
        return None if entries is None else {k: v for k, (_, v) in entries.items()}

    def get(self, m: dict[str, Node], key: str, conv: Conv[T], default: T) -> T:
        node = m.get(key)
        value = conv(node, key) if node is not None else None
        return default if value is None else value

    def period(self, node: Node, what: str) -> float | None:
        """A duration longer than 0s."""
        return self.duration(node, what, positive=True)


@dataclass(frozen=True)
class DurationSpec:
    """How long jobs run at full speed: ``lognormal`` (median, sigma), ``exponential``
    (mean) or ``fixed`` (value)."""

    distribution: str
    median: float = 3600.0
    sigma: float = 1.0
    mean: float = 3600.0
    value: float = 3600.0


@dataclass(frozen=True)
class PauseSpec:
    """``checkpointPause``: the median pause and the lognormal spread of the pauses
    around it (``sigma`` 0: every pause is ``median``; ``median`` 0: no pause)."""

    median: float = 0.0
    sigma: float = 0.0


@dataclass(frozen=True)
class SwingSpec:
    """Arrival rate x (1 + amplitude x sin(2 pi t / period)): a day's load curve."""

    period: float
    amplitude: float


@dataclass(frozen=True)
class WorkloadSpec:
    arrivals_per_hour: float
    sizes: tuple[tuple[int, float], ...]
    duration: DurationSpec
    checkpoint_interval: float = 1800.0
    restart_overhead: float = 300.0
    timeout_factor: float = 3.0
    deadline_factor: float = 6.0
    stall_probability: float = 0.0
    utilization: tuple[float, float] = (0.6, 0.95)
    # pool name -> weight; empty: in proportion to each pool's initial devices.
    pools: tuple[tuple[str, float], ...] = ()
    namespaces: int = 3
    # PodDisruptionBudget per namespace: evictions refused while this many of its
    # pods are disrupted (evicted, replacement not yet running). None: no PDB.
    pdb_max_unavailable: int | None = None
    backoff_limit: int = 6
    swing: SwingSpec | None = None
    # Where a job may run: "pool" (the pool it is drawn for), "vendor" (any pool of
    # that pool's vendor), or "list" (any of ``eligible_pools`` when drawn for one).
    eligible: str = "pool"
    eligible_pools: tuple[str, ...] = ()
    precision: str = DEFAULT_PRECISION
    # The owner object of gang jobs ("jobset" | "pytorchjob"); None: no gangs, every
    # job fits one node.
    gang_kind: str | None = None
    # How long one checkpoint write idles a gang's devices (median 0: no pause).
    checkpoint_pause: PauseSpec = PauseSpec()
    # The share of jobs whose pods declare their checkpoints (the annotations).
    declares: float = 0.0
    # Jobs already submitted when the scenario starts (a fleet that starts busy).
    initial_jobs: int = 0


WORKLOAD_KEYS = (
    "arrivalsPerHour",
    "sizes",
    "duration",
    "checkpointInterval",
    "restartOverhead",
    "timeoutFactor",
    "deadlineFactor",
    "stallProbability",
    "utilization",
    "pools",
    "namespaces",
    "pdbMaxUnavailable",
    "backoffLimit",
    "swing",
    "eligiblePools",
    "precision",
    "gangKind",
    "checkpointPause",
    "initialJobs",
    "declares",
)


def read_workload(
    r: ScenarioReader, node: Node, specs: tuple[PoolSpec, ...]
) -> WorkloadSpec | None:
    """The ``workload`` mapping; None where it cannot be built (the problems are in ``r``)."""
    m = r.fields(node, "workload", WORKLOAD_KEYS, required=("arrivalsPerHour", "sizes", "duration"))
    if m is None:
        return None
    rate = r.get(m, "arrivalsPerHour", r.number, 1.0)
    sizes = _sizes(r, m["sizes"]) if "sizes" in m else []
    duration = _duration_spec(r, m["duration"]) if "duration" in m else None
    util = _utilization(r, m["utilization"]) if "utilization" in m else (0.6, 0.95)
    pools = {p.name for p in specs}
    weights = _pool_weights(r, m["pools"], pools) if "pools" in m else []
    swing = _swing(r, m["swing"]) if "swing" in m else None
    pdb = r.get(m, "pdbMaxUnavailable", lambda n, w: r.bounded(n, w, 1, MAX_INT32), None)
    listed: tuple[str, ...]
    eligible, listed = "pool", ()
    if "eligiblePools" in m:
        eligible, listed = _eligible(r, m["eligiblePools"], specs)
    precision = r.get(m, "precision", lambda n, w: r.choice(n, w, PRECISIONS), DEFAULT_PRECISION)
    gang_kind = r.get(m, "gangKind", lambda n, w: r.choice(n, w, GANG_KINDS), None)
    pause = r.get(m, "checkpointPause", lambda n, w: _pause(r, n), PauseSpec())
    interval = r.get(m, "checkpointInterval", r.duration, 1800.0)
    if pause.median > 0 and pause.median >= interval:
        r.problem(
            m["checkpointPause"],
            f"checkpointPause ({pause.median:g}s) must be shorter than checkpointInterval "
            f"({interval:g}s): the pause is the end of each interval",
        )
    if duration is None:
        return None
    return WorkloadSpec(
        arrivals_per_hour=rate,
        sizes=tuple(sizes),
        duration=duration,
        checkpoint_interval=interval,
        restart_overhead=r.get(m, "restartOverhead", r.duration, 300.0),
        timeout_factor=r.get(m, "timeoutFactor", lambda n, w: r.number(n, w, 1.0), 3.0),
        deadline_factor=r.get(m, "deadlineFactor", lambda n, w: r.number(n, w, 1.0), 6.0),
        stall_probability=r.get(m, "stallProbability", lambda n, w: r.number(n, w, 0.0, 1.0), 0.0),
        utilization=util,
        pools=tuple(weights),
        namespaces=r.get(m, "namespaces", lambda n, w: r.bounded(n, w, 1, MAX_NAMESPACES), 3),
        pdb_max_unavailable=pdb,
        backoff_limit=r.get(m, "backoffLimit", lambda n, w: r.bounded(n, w, 0, MAX_INT32), 6),
        swing=swing,
        eligible=eligible,
        eligible_pools=listed,
        precision=precision,
        gang_kind=gang_kind,
        checkpoint_pause=pause,
        initial_jobs=r.get(m, "initialJobs", lambda n, w: r.bounded(n, w, 0, MAX_INITIAL_JOBS), 0),
        declares=r.get(m, "declares", lambda n, w: r.number(n, w, 0.0, 1.0), 0.0),
    )


def _pause(r: ScenarioReader, node: Node) -> PauseSpec | None:
    """``checkpointPause``: a duration, or ``{median: DURATION, sigma: NUMBER}``."""
    if not isinstance(node, (MappingNode, ScalarNode)):
        r.problem(node, "checkpointPause must be a duration or {median: 2m, sigma: 0.5}")
        return None
    if isinstance(node, ScalarNode):
        fixed = r.duration(node, "checkpointPause", maximum=MAX_PAUSE)
        return None if fixed is None else PauseSpec(fixed, 0.0)
    what = "checkpointPause (a duration, or {median: 2m, sigma: 0.5})"
    m = r.fields(node, what, ("median", "sigma"), required=("median", "sigma"))
    if m is None:
        return None
    median: float | None = None
    sigma: float | None = None
    if "median" in m:
        median = r.duration(m["median"], "checkpointPause.median", minimum=1.0, maximum=MAX_PAUSE)
    if "sigma" in m:
        sigma = r.number(m["sigma"], "checkpointPause.sigma", 0.0, MAX_PAUSE_SIGMA)
    if median is None or sigma is None:
        return None
    return PauseSpec(median, sigma)


def _sizes(r: ScenarioReader, node: Node) -> list[tuple[int, float]]:
    """``sizes``: job sizes in devices, each with its weight in the draw."""
    sizes: list[tuple[int, float]] = []
    sm = r.fields(node, "sizes (devices: weight)", None)
    for k, v in node.value if sm is not None else []:
        size = r.integer(k, "a job size (devices)", 1)
        weight = r.number(v, f"the weight of size {k.value}")
        if size is not None and weight is not None:
            sizes.append((size, weight))
    if sm is not None and not sizes:
        r.problem(node, "sizes needs at least one entry, e.g. {1: 3, 8: 1}")
    elif sizes and sum(w for _, w in sizes) <= 0:
        r.problem(node, "the weights of sizes must not all be 0")
    return sizes


def _utilization(r: ScenarioReader, node: Node) -> tuple[float, float]:
    """``utilization``: the range a running job's device busy fraction is drawn from."""
    um = r.fields(node, "utilization", ("min", "max"), required=("min", "max"))
    if um is None:
        return (0.6, 0.95)
    lo = r.get(um, "min", lambda n, w: r.number(n, w, 0.0, 1.0), 0.6)
    hi = r.get(um, "max", lambda n, w: r.number(n, w, 0.0, 1.0), 0.95)
    if lo > hi:
        r.problem(node, f"min {lo:g} is above max {hi:g}")
    return (lo, hi)


def _pool_weights(r: ScenarioReader, node: Node, pools: set[str]) -> list[tuple[str, float]]:
    """``pools``: which fleet pools jobs are drawn for, and how often; a name that
    is no pool of the fleet is a problem."""
    weights: list[tuple[str, float]] = []
    pm = r.fields(node, "workload pools (pool: weight)", None)
    for k, v in node.value if pm is not None else []:
        if not isinstance(k, ScalarNode):
            continue  # reported by fields(): keys must be strings
        if k.value not in pools:
            r.problem(k, f"no pool named {k.value!r}{did_you_mean(str(k.value), sorted(pools))}")
            continue
        w = r.number(v, f"the weight of pool {k.value}")
        if w is not None:
            weights.append((str(k.value), w))
    return weights


def _swing(r: ScenarioReader, node: Node) -> SwingSpec | None:
    """``swing``: a daily (or other ``period``) rise and fall of the arrival rate."""
    wm = r.fields(node, "swing", ("period", "amplitude"), required=("period", "amplitude"))
    if wm is None:
        return None
    return SwingSpec(
        r.get(wm, "period", r.period, 86400.0),
        r.get(wm, "amplitude", lambda n, w: r.number(n, w, 0.0, 1.0), 0.5),
    )


def _eligible(
    r: ScenarioReader, node: Node, specs: tuple[PoolSpec, ...]
) -> tuple[str, tuple[str, ...]]:
    """``eligiblePools``: ``pool``, ``vendor``, or a list of one vendor's pools (a pod
    asks for one vendor's extended resource, so it can only be offered one's)."""
    if isinstance(node, ScalarNode):
        value = r.value(node)
        if value in ELIGIBILITY:
            return str(value), ()
        r.problem(
            node,
            f"eligiblePools must be pool, vendor or a list of pool names (e.g. [h100, l40s]), "
            f"got {value!r}{did_you_mean(str(value), ELIGIBILITY)}",
        )
        return "pool", ()
    if not isinstance(node, SequenceNode) or not node.value:
        r.problem(
            node, "eligiblePools must be pool, vendor or a list of pool names (e.g. [h100, l40s])"
        )
        return "pool", ()
    by_name = {p.name: p for p in specs}
    names: list[str] = []
    vendors: dict[str, str] = {}
    for item in node.value:
        name = r.value(item) if isinstance(item, ScalarNode) else None
        if name not in by_name:
            r.problem(
                item,
                f"no pool named {name!r}{did_you_mean(str(name), sorted(by_name))}",
            )
            continue
        if name in names:
            r.problem(item, f"pool {name!r} is listed twice")
            continue
        names.append(str(name))
        vendors.setdefault(by_name[name].vendor, str(name))
    if len(vendors) > 1:
        shown = ", ".join(f"{p} is {v}" for v, p in vendors.items())
        r.problem(
            node,
            f"eligiblePools mixes vendors ({shown}): a pod asks for one vendor's "
            f"devices ({', '.join(VENDOR_RESOURCE.values())}), so list one vendor's pools",
        )
    return "list", tuple(sorted(names))


def _duration_spec(r: ScenarioReader, node: Node) -> DurationSpec | None:
    m = r.fields(
        node,
        "duration",
        ("distribution", "median", "sigma", "mean", "value"),
        required=("distribution",),
    )
    if m is None:
        return None
    dist = r.get(m, "distribution", lambda n, w: r.choice(n, w, DISTRIBUTIONS), "lognormal")
    need = {"lognormal": ("median",), "exponential": ("mean",), "fixed": ("value",)}.get(dist, ())
    for key in need:
        if key not in m:
            r.problem(node, f"a {dist} duration needs {key!r}")
    return DurationSpec(
        dist,
        median=r.get(m, "median", r.period, 3600.0),
        sigma=r.get(m, "sigma", lambda n, w: r.number(n, w, 0.0, 5.0), 1.0),
        mean=r.get(m, "mean", r.period, 3600.0),
        value=r.get(m, "value", r.period, 3600.0),
    )


__all__ = [
    "DISTRIBUTIONS",
    "ELIGIBILITY",
    "GANG_KINDS",
    "MAX_PAUSE",
    "MAX_PAUSE_SIGMA",
    "WORKLOAD_KEYS",
    "Conv",
    "DurationSpec",
    "PauseSpec",
    "PoolSpec",
    "ScenarioReader",
    "SwingSpec",
    "WorkloadSpec",
    "read_workload",
]
