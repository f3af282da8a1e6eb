"""Scenario files: the fleet, its workload and its faults, as YAML.

A scenario says everything the simulation needs except the rules, so that one
scenario can be run against any rule set and the baseline::

    apiVersion: accel-fleet/v1
    kind: Scenario
    spec:
      duration: 24h
      evaluationInterval: 60s       # the controller's cycle: scrape, then evaluate
      seed: 1
      pools:
        - {name: h100, vendor: nvidia, devicesPerNode: 8, initial: 8, min: 4, max: 12,
           provisionTime: 10m}
      workload:
        arrivalsPerHour: 20          # Poisson
        sizes: {1: 4, 2: 3, 4: 2, 8: 1}
        duration: {distribution: lognormal, median: 2h, sigma: 0.8}
        checkpointInterval: 30m
        restartOverhead: 5m
        timeoutFactor: 3             # accel-fleet.io/timeout = 3 x the job's nominal run
        deadlineFactor: 6            # activeDeadlineSeconds: Kubernetes fails the job
        stallProbability: 0.02
        eligiblePools: pool          # pool | vendor | [h100, l40s]: where a job may run
        precision: bf16              # what its FLOPs are counted in
      faults:
        ratesPerDeviceHour: {fatal: 0.0005, hang: 0.0002}
        events:
          - {at: 2h, kind: fatal, node: h100-0001, device: nvidia3}

**Where a job may run, and how fast.** Each job is drawn for one pool (``workload.pools``:
pool -> weight; by default in proportion to each pool's devices), and its drawn
duration is its run time on that pool's device model: its *reference*. With
``eligiblePools: pool`` (the default) it runs there and nowhere else, its pod
bound by ``nodeSelector``. With ``eligiblePools: vendor`` it may run on every pool
of the same vendor whose nodes are big enough, its pod asking only for the
vendor's resource (``nvidia.com/gpu``), as most real jobs do; with a list of pool
names (one vendor's), a job drawn for one of them may run on any of them (a
required node affinity on the pool label) and the other pools' jobs stay bound.
On another model a job runs ``peak(reference) / peak(model)`` times as long, the
peaks at ``precision`` from the placement scorer's catalogue
(``autoscaler/placement/devices.yaml``), so every pool's ``model`` must be in it.
The pod carries the job's work in FLOPs (``accel-fleet.io/flops``: duration x
reference peak x devices), as the scorer reads it on a real cluster.

Like the rule loader, the reader never stops at the first mistake: every problem
is reported at once as ``file:line:col: message`` (``ScenarioError``), with what
was expected.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeVar

import yaml

from accel_common.durations import parse_duration
from autoscaler.actions.base import did_you_mean
from autoscaler.placement.catalogue import (
    CATALOGUE_PATH,
    DEFAULT_PRECISION,
    PRECISIONS,
    default_catalogue,
)
from autoscaler.ruleset.errors import Problem, sorted_problems, whole_file
from autoscaler.ruleset.model import Position

API_VERSION = "accel-fleet/v1"
KIND = "Scenario"

VENDORS = ("nvidia", "amd", "oneapi")
# How each vendor's devices are wired inside a node unless a pool says otherwise:
# NVSwitch boards and MI300X OAM platforms connect every pair; an Intel node (and
# any pool with ``topology: pcie``) has only the PCIe tree.
DEFAULT_TOPOLOGY = {"nvidia": "nvlink", "amd": "xgmi", "oneapi": "pcie"}
TOPOLOGIES = ("nvlink", "xgmi", "pcie")
DEFAULT_MODEL = {
    "nvidia": "NVIDIA H100 80GB HBM3",
    "amd": "AMD Instinct MI300X",
    "oneapi": "Intel(R) Data Center GPU Max 1550",
}
# The extended resource each vendor's device plugin advertises.
RESOURCE = {"nvidia": "nvidia.com/gpu", "amd": "amd.com/gpu", "oneapi": "gpu.intel.com/i915"}

# ``eligiblePools``: the job's own pool only, or every pool of its vendor.
ELIGIBILITY = ("pool", "vendor")

FAULT_KINDS = ("fatal", "ecc_uncorrected", "device_lost", "hang", "stall", "node_down")
DISTRIBUTIONS = ("lognormal", "exponential", "fixed")

T = TypeVar("T")


class ScenarioError(ValueError):
    """A scenario that cannot be run; ``problems`` lists every reason, and ``str()`` is
    one ``file:line:col: message`` per line."""

    def __init__(self, problems: list[Problem]) -> None:
        self.problems = sorted_problems(problems)
        super().__init__("\n".join(str(p) for p in self.problems))


@dataclass(frozen=True)
class PoolSpec:
    name: str
    vendor: str
    model: str
    devices_per_node: int
    initial: int
    min: int
    max: int
    provision_time: float
    topology: str


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


@dataclass(frozen=True)
class FaultEvent:
    at: float
    kind: str
    node: str
    device: int | None  # index within the node; None for node_down


@dataclass(frozen=True)
class FaultSpec:
    rates: tuple[tuple[str, float], ...] = ()
    events: tuple[FaultEvent, ...] = ()
    # How long a lost device and a downed node stay away; how long a device needs to
    # reset after a fatal fault, an ECC burst or a hang, once its job has left it.
    device_lost_recovery: float = 1800.0
    node_down_recovery: float = 3600.0
    reset_time: float = 300.0
    ecc_burst: int = 3


@dataclass(frozen=True)
class Scenario:
    name: str
    duration: float
    evaluation_interval: float
    seed: int
    scrape_interval: float
    pools: tuple[PoolSpec, ...]
    workload: WorkloadSpec
    faults: FaultSpec
    scheduler: str = "first-fit"
    # Points in the plots' timelines.
    samples: int = 400
    source: str = "<scenario>"
    initial_nodes: dict[str, tuple[str, ...]] = field(default_factory=dict)


def node_name(pool: str, index: int) -> str:
    """The name of a pool's ``index``-th node, as the scenario's events name it."""
    return f"{pool}-{index:04d}"


def device_name(vendor: str, index: int) -> str:
    """The exporter's device name (``nvidia3``)."""
    return f"{vendor}{index}"


# -- reading ---------------------------------------------------------------------

_INVALID: Any = object()


class _Reader:
    """Walks the composed YAML tree, converting values and recording problems."""

    def __init__(self, file: str) -> None:
        self.file = file
        self.problems: list[Problem] = []

    def pos(self, node: yaml.Node) -> Position:
        return Position(self.file, node.start_mark.line + 1, node.start_mark.column + 1)

    def problem(self, node: yaml.Node, message: str) -> None:
        self.problems.append(Problem(self.pos(node), message))

    def mapping(
        self,
        node: yaml.Node,
        what: str,
        keys: tuple[str, ...],
        required: tuple[str, ...] = (),
    ) -> dict[str, yaml.Node] | None:
        if not isinstance(node, yaml.MappingNode):
            self.problem(node, f"{what} must be a mapping with keys {', '.join(keys)}")
            return None
        out: dict[str, yaml.Node] = {}
        for k, v in node.value:
            key = str(k.value)
            if keys and key not in keys:
                self.problem(
                    k,
                    f"unknown key {key!r} in {what}{did_you_mean(key, keys)} "
                    f"(expected {', '.join(keys)})",
                )
            elif key in out:
                self.problem(k, f"{key!r} is given twice in {what}")
            else:
                out[key] = v
        for key in required:
            if key not in out:
                self.problem(node, f"{what} is missing {key!r}")
        return out

    def scalar(self, node: yaml.Node) -> Any:
        if not isinstance(node, yaml.ScalarNode):
            return _INVALID
        return yaml.safe_load(yaml.serialize(node))

    def get(
        self,
        m: dict[str, yaml.Node],
        key: str,
        conv: Callable[[yaml.Node], T],
        default: T,
    ) -> T:
        node = m.get(key)
        if node is None:
            return default
        value = conv(node)
        return default if value is _INVALID else value

    def duration(self, node: yaml.Node, *, positive: bool = True) -> Any:
        value = self.scalar(node)
        if isinstance(value, bool) or value is _INVALID:
            self.problem(node, f"expected a duration such as 30s, 5m or 1h, got {value!r}")
            return _INVALID
        if isinstance(value, (int, float)):
            if value == 0 and not positive:
                return 0.0
            self.problem(node, f"{value!r} has no unit (use e.g. {value}s, {value}m or {value}h)")
            return _INVALID
        try:
            seconds = parse_duration(str(value))
        except ValueError as e:
            self.problem(node, str(e))
            return _INVALID
        if positive and seconds <= 0:
            self.problem(node, f"must be longer than 0s, got {value!r}")
            return _INVALID
        return seconds

    def number(self, node: yaml.Node, low: float = 0.0, high: float = math.inf) -> Any:
        value = self.scalar(node)
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            self.problem(node, f"expected a number, got {value!r}")
            return _INVALID
        if not low <= value <= high:
            limit = f"from {low:g} to {high:g}" if math.isfinite(high) else f"at least {low:g}"
            self.problem(node, f"must be {limit}, got {value!r}")
            return _INVALID
        return float(value)

    def integer(self, node: yaml.Node, low: int = 0) -> Any:
        value = self.scalar(node)
        if isinstance(value, bool) or not isinstance(value, int):
            self.problem(node, f"expected a whole number, got {value!r}")
            return _INVALID
        if value < low:
            self.problem(node, f"must be at least {low}, got {value}")
            return _INVALID
        return value

    def string(self, node: yaml.Node) -> Any:
        value = self.scalar(node)
        if not isinstance(value, str) or not value:
            self.problem(node, f"expected a non-empty string, got {value!r}")
            return _INVALID
        return value

    def choice(self, node: yaml.Node, choices: tuple[str, ...]) -> Any:
        value = self.scalar(node)
        if value not in choices:
            self.problem(
                node,
                f"must be one of {', '.join(choices)}, got {value!r}"
                f"{did_you_mean(str(value), choices)}",
            )
            return _INVALID
        return value


_TOP = ("apiVersion", "kind", "spec")
_SPEC = (
    "duration",
    "evaluationInterval",
    "scrapeInterval",
    "seed",
    "scheduler",
    "samples",
    "pools",
    "workload",
    "faults",
)
_POOL = (
    "name",
    "vendor",
    "model",
    "devicesPerNode",
    "initial",
    "min",
    "max",
    "provisionTime",
    "topology",
)
_WORKLOAD = (
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
)
_FAULTS = (
    "ratesPerDeviceHour",
    "events",
    "deviceLostRecovery",
    "nodeDownRecovery",
    "resetTime",
    "eccBurst",
)


def load_scenario(path: str | Path, schedulers: tuple[str, ...] | None = None) -> Scenario:
    """Reads and validates a scenario; raises ``ScenarioError`` naming every problem.
    ``schedulers``: the names a scenario may choose (default: ``SCHEDULERS``)."""
    if schedulers is None:
        from autoscaler.simulate.scheduler import SCHEDULERS

        schedulers = tuple(SCHEDULERS)
    file = str(path)
    r = _Reader(file)
    try:
        text = Path(file).read_text(encoding="utf-8")
    except OSError as e:
        raise ScenarioError([Problem(whole_file(file), f"cannot read: {e.strerror or e}")]) from e
    try:
        root = yaml.compose(text, Loader=yaml.SafeLoader)
    except yaml.MarkedYAMLError as e:
        mark = e.problem_mark or e.context_mark
        where = Position(file, mark.line + 1, mark.column + 1) if mark else whole_file(file)
        raise ScenarioError([Problem(where, f"invalid YAML: {e.problem}")]) from e
    if root is None:
        raise ScenarioError(
            [
                Problem(
                    whole_file(file),
                    f"empty file: expected apiVersion: {API_VERSION}, kind: {KIND} and a spec",
                )
            ]
        )
    top = r.mapping(root, "a scenario file", _TOP, required=_TOP)
    scenario: Scenario | None = None
    if top is not None:
        for key, expected in (("apiVersion", API_VERSION), ("kind", KIND)):
            if key in top:
                got = r.scalar(top[key])
                if got != expected:
                    r.problem(top[key], f"{key} must be {expected!r}, got {got!r}")
        if "spec" in top:
            scenario = _spec(r, top["spec"], Path(file).stem, schedulers)
    if r.problems or scenario is None:
        raise ScenarioError(r.problems)
    return scenario


def _spec(r: _Reader, node: yaml.Node, name: str, schedulers: tuple[str, ...]) -> Scenario | None:
    m = r.mapping(node, "spec", _SPEC, required=("duration", "pools", "workload"))
    if m is None:
        return None
    duration = r.get(m, "duration", r.duration, 86400.0)
    interval = r.get(m, "evaluationInterval", r.duration, 15.0)
    seed = r.get(m, "seed", r.integer, 1)
    scrape = r.get(m, "scrapeInterval", r.duration, interval)
    if scrape > interval or (interval / scrape) % 1 > 1e-9:
        r.problem(
            m.get("scrapeInterval", node),
            f"scrapeInterval ({scrape:g}s) must divide evaluationInterval ({interval:g}s)",
        )
    scheduler = r.get(m, "scheduler", lambda n: r.choice(n, schedulers), "first-fit")
    samples = r.get(m, "samples", lambda n: r.integer(n, 10), 400)
    pools = _pools(r, m["pools"]) if "pools" in m else ()
    workload = _workload(r, m["workload"], pools) if "workload" in m else None
    initial = {p.name: tuple(node_name(p.name, i) for i in range(p.initial)) for p in pools}
    faults = _faults(r, m["faults"], pools, initial) if "faults" in m else FaultSpec()
    if workload is None:
        return None
    _check_models(r, m["pools"], pools, workload.precision)
    if pools and workload is not None:
        for p in pools:
            too_big = [s for s, _ in workload.sizes if s > p.devices_per_node]
            if too_big and (not workload.pools or p.name in dict(workload.pools)):
                r.problem(
                    m["workload"],
                    f"job size {too_big[0]} does not fit pool {p.name!r} "
                    f"({p.devices_per_node} devices per node); jobs run on one node",
                )
    return Scenario(
        name=name,
        duration=duration,
        evaluation_interval=interval,
        seed=seed,
        scrape_interval=scrape,
        pools=pools,
        workload=workload,
        faults=faults,
        scheduler=scheduler,
        samples=samples,
        source=r.file,
        initial_nodes=initial,
    )


def _pools(r: _Reader, node: yaml.Node) -> tuple[PoolSpec, ...]:
    if not isinstance(node, yaml.SequenceNode) or not node.value:
        r.problem(node, "pools must be a non-empty list of pools")
        return ()
    out: list[PoolSpec] = []
    seen: set[str] = set()
    for item in node.value:
        m = r.mapping(item, "a pool", _POOL, required=("name", "vendor", "initial", "max"))
        if m is None:
            continue
        name = r.get(m, "name", r.string, "")
        if name in seen:
            r.problem(m["name"], f"pool {name!r} is defined twice")
        seen.add(name)
        vendor = r.get(m, "vendor", lambda n: r.choice(n, VENDORS), "nvidia")
        model = r.get(m, "model", r.string, DEFAULT_MODEL[vendor])
        per_node = r.get(m, "devicesPerNode", lambda n: r.integer(n, 1), 8)
        initial = r.get(m, "initial", r.integer, 0)
        low = r.get(m, "min", r.integer, 0)
        high = r.get(m, "max", lambda n: r.integer(n, 1), max(initial, 1))
        provision = r.get(m, "provisionTime", lambda n: r.duration(n, positive=False), 600.0)
        topology = r.get(m, "topology", lambda n: r.choice(n, TOPOLOGIES), DEFAULT_TOPOLOGY[vendor])
        if not low <= initial <= high:
            r.problem(
                item, f"pool {name!r}: need min <= initial <= max, got {low}, {initial}, {high}"
            )
        if topology != "pcie" and topology != DEFAULT_TOPOLOGY.get(vendor, topology):
            r.problem(
                m["topology"],
                f"{vendor} devices have no {topology} links (use "
                f"{DEFAULT_TOPOLOGY[vendor]} or pcie)",
            )
        out.append(PoolSpec(name, vendor, model, per_node, initial, low, high, provision, topology))
    return tuple(out)


def _workload(r: _Reader, node: yaml.Node, specs: tuple[PoolSpec, ...]) -> WorkloadSpec | None:
    m = r.mapping(node, "workload", _WORKLOAD, required=("arrivalsPerHour", "sizes", "duration"))
    if m is None:
        return None
    pools = {p.name for p in specs}
    rate = r.get(m, "arrivalsPerHour", r.number, 1.0)
    sizes: list[tuple[int, float]] = []
    if "sizes" in m:
        sm = r.mapping(m["sizes"], "sizes (devices: weight)", ())
        for k, v in m["sizes"].value if sm is not None else []:
            size = r.integer(k, 1)
            weight = r.number(v)
            if size is not _INVALID and weight is not _INVALID:
                sizes.append((size, weight))
        if sm is not None and not sizes:
            r.problem(m["sizes"], "sizes needs at least one entry, e.g. {1: 3, 8: 1}")
        elif sizes and sum(w for _, w in sizes) <= 0:
            r.problem(m["sizes"], "the weights of sizes must not all be 0")
    duration = _duration_spec(r, m["duration"]) if "duration" in m else None
    util = (0.6, 0.95)
    if "utilization" in m:
        um = r.mapping(m["utilization"], "utilization", ("min", "max"), required=("min", "max"))
        if um is not None:
            lo = r.get(um, "min", lambda n: r.number(n, 0.0, 1.0), 0.6)
            hi = r.get(um, "max", lambda n: r.number(n, 0.0, 1.0), 0.95)
            if lo > hi:
                r.problem(m["utilization"], f"min {lo:g} is above max {hi:g}")
            util = (lo, hi)
    weights: list[tuple[str, float]] = []
    if "pools" in m:
        pm = r.mapping(m["pools"], "workload pools (pool: weight)", ())
        for k, v in m["pools"].value if pm is not None else []:
            if k.value not in pools:
                r.problem(
                    k, f"no pool named {k.value!r}{did_you_mean(str(k.value), sorted(pools))}"
                )
                continue
            w = r.number(v)
            if w is not _INVALID:
                weights.append((str(k.value), w))
    swing = None
    if "swing" in m:
        wm = r.mapping(
            m["swing"], "swing", ("period", "amplitude"), required=("period", "amplitude")
        )
        if wm is not None:
            swing = SwingSpec(
                r.get(wm, "period", r.duration, 86400.0),
                r.get(wm, "amplitude", lambda n: r.number(n, 0.0, 1.0), 0.5),
            )
    pdb = r.get(m, "pdbMaxUnavailable", lambda n: r.integer(n, 1), None)
    listed: tuple[str, ...]
    eligible, listed = "pool", ()
    if "eligiblePools" in m:
        eligible, listed = _eligible(r, m["eligiblePools"], specs)
    precision = r.get(m, "precision", lambda n: r.choice(n, PRECISIONS), DEFAULT_PRECISION)
    if duration is None:
        return None
    return WorkloadSpec(
        arrivals_per_hour=rate,
        sizes=tuple(sizes),
        duration=duration,
        checkpoint_interval=r.get(
            m, "checkpointInterval", lambda n: r.duration(n, positive=False), 1800.0
        ),
        restart_overhead=r.get(
            m, "restartOverhead", lambda n: r.duration(n, positive=False), 300.0
        ),
        timeout_factor=r.get(m, "timeoutFactor", lambda n: r.number(n, 1.0), 3.0),
        deadline_factor=r.get(m, "deadlineFactor", lambda n: r.number(n, 1.0), 6.0),
        stall_probability=r.get(m, "stallProbability", lambda n: r.number(n, 0.0, 1.0), 0.0),
        utilization=util,
        pools=tuple(weights),
        namespaces=r.get(m, "namespaces", lambda n: r.integer(n, 1), 3),
        pdb_max_unavailable=pdb,
        backoff_limit=r.get(m, "backoffLimit", r.integer, 6),
        swing=swing,
        eligible=eligible,
        eligible_pools=listed,
        precision=precision,
    )


def _eligible(
    r: _Reader, node: yaml.Node, specs: tuple[PoolSpec, ...]
) -> tuple[str, tuple[str, ...]]:
    """``eligiblePools``: ``pool``, ``vendor``, or a list of one vendor's pools (a pod
    asks for one vendor's extended resource, so it can only be offered one's)."""
    if isinstance(node, yaml.ScalarNode):
        value = r.scalar(node)
        if value in ELIGIBILITY:
            return str(value), ()
        r.problem(
            node,
            f"eligiblePools must be pool, vendor or a list of pool names (e.g. [h100, l40s]), "
            f"got {value!r}{did_you_mean(str(value), ELIGIBILITY)}",
        )
        return "pool", ()
    if not isinstance(node, yaml.SequenceNode) or not node.value:
        r.problem(
            node, "eligiblePools must be pool, vendor or a list of pool names (e.g. [h100, l40s])"
        )
        return "pool", ()
    by_name = {p.name: p for p in specs}
    names: list[str] = []
    vendors: dict[str, str] = {}
    for item in node.value:
        name = r.scalar(item)
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
            "devices (nvidia.com/gpu, amd.com/gpu, ...), so list one vendor's pools",
        )
    return "list", tuple(sorted(names))


def _check_models(r: _Reader, node: yaml.Node, pools: tuple[PoolSpec, ...], precision: str) -> None:
    """Every pool's model must have a peak at ``precision`` in the scorer's device
    catalogue: a job's speed on it comes from there."""
    catalogue = default_catalogue()
    where: dict[str, yaml.Node] = {}
    for item in node.value if isinstance(node, yaml.SequenceNode) else ():
        if isinstance(item, yaml.MappingNode):
            keys = {str(k.value): v for k, v in item.value}
            if "name" in keys:
                where[str(r.scalar(keys["name"]))] = keys.get("model", item)
    known = ", ".join(repr(e.match[0]) for e in catalogue.models)
    for p in pools:
        at = where.get(p.name, node)
        entry = catalogue.lookup(p.model)
        if entry is None:
            r.problem(
                at,
                f"pool {p.name!r}: model {p.model!r} is not in the device catalogue "
                f"({CATALOGUE_PATH.name}); use a model whose name contains one of {known}, "
                "or add the model there with its datasheet figures",
            )
        elif precision not in entry.peak_flops:
            r.problem(
                at,
                f"pool {p.name!r}: the device catalogue has no {precision} peak for "
                f"{entry.name} (it has {', '.join(entry.peak_flops)}); set workload "
                "precision to one every pool's model has",
            )


def _duration_spec(r: _Reader, node: yaml.Node) -> DurationSpec | None:
    m = r.mapping(
        node,
        "duration",
        ("distribution", "median", "sigma", "mean", "value"),
        required=("distribution",),
    )
    if m is None:
        return None
    dist = r.get(m, "distribution", lambda n: r.choice(n, DISTRIBUTIONS), "lognormal")
    need = {"lognormal": ("median",), "exponential": ("mean",), "fixed": ("value",)}.get(dist, ())
    for key in need:
        if key not in m:
            r.problem(node, f"a {dist} duration needs {key!r}")
    return DurationSpec(
        dist,
        median=r.get(m, "median", r.duration, 3600.0),
        sigma=r.get(m, "sigma", lambda n: r.number(n, 0.0, 5.0), 1.0),
        mean=r.get(m, "mean", r.duration, 3600.0),
        value=r.get(m, "value", r.duration, 3600.0),
    )


def _faults(
    r: _Reader, node: yaml.Node, pools: tuple[PoolSpec, ...], initial: dict[str, tuple[str, ...]]
) -> FaultSpec:
    m = r.mapping(node, "faults", _FAULTS)
    if m is None:
        return FaultSpec()
    rates: list[tuple[str, float]] = []
    if "ratesPerDeviceHour" in m:
        rm = r.mapping(m["ratesPerDeviceHour"], "ratesPerDeviceHour", FAULT_KINDS)
        for key, v in (rm or {}).items():
            value = r.number(v, 0.0, 1.0)
            if value is not _INVALID:
                rates.append((key, value))
    nodes = {n: p for p in pools for n in initial.get(p.name, ())}
    events: list[FaultEvent] = []
    if "events" in m:
        ev = m["events"]
        if not isinstance(ev, yaml.SequenceNode):
            r.problem(ev, "events must be a list of {at, kind, node, device}")
        else:
            for item in ev.value:
                e = _event(r, item, nodes)
                if e is not None:
                    events.append(e)
    return FaultSpec(
        rates=tuple(rates),
        events=tuple(sorted(events, key=lambda e: e.at)),
        device_lost_recovery=r.get(m, "deviceLostRecovery", r.duration, 1800.0),
        node_down_recovery=r.get(m, "nodeDownRecovery", r.duration, 3600.0),
        reset_time=r.get(m, "resetTime", lambda n: r.duration(n, positive=False), 300.0),
        ecc_burst=r.get(m, "eccBurst", lambda n: r.integer(n, 1), 3),
    )


def _event(r: _Reader, item: yaml.Node, nodes: dict[str, PoolSpec]) -> FaultEvent | None:
    m = r.mapping(
        item, "a fault event", ("at", "kind", "node", "device"), required=("at", "kind", "node")
    )
    if m is None:
        return None
    at = r.get(m, "at", lambda n: r.duration(n, positive=False), _INVALID)
    kind = r.get(m, "kind", lambda n: r.choice(n, FAULT_KINDS), _INVALID)
    node = r.get(m, "node", r.string, _INVALID)
    pool = nodes.get(node) if node is not _INVALID else None
    if node is not _INVALID and pool is None:
        r.problem(
            m["node"],
            f"no initial node named {node!r}{did_you_mean(node, sorted(nodes))}"
            " (nodes are named POOL-NNNN, from 0000)",
        )
    device: int | None = None
    if "device" in m and pool is not None:
        names = [device_name(pool.vendor, i) for i in range(pool.devices_per_node)]
        got = r.scalar(m["device"])
        if got in names:
            device = names.index(got)
        else:
            r.problem(
                m["device"],
                f"node {node!r} has no device {got!r} (it has {names[0]} to {names[-1]})",
            )
    if kind not in (_INVALID, "node_down") and "device" not in m:
        r.problem(
            item,
            f"a {kind} event needs a device (e.g. device: {pool.vendor if pool else 'nvidia'}0)",
        )
        return None
    if _INVALID in (at, kind, node) or pool is None:
        return None
    return FaultEvent(at, kind, node, device)
