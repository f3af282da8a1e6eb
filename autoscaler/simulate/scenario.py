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

Before anything is built, the work a scenario asks for (devices, evaluations, jobs,
faults) is held against ``WorkLimits`` (``limits.py``), and a scenario over one is
refused where it asks for it.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TypeVar

from yaml.nodes import MappingNode, Node, ScalarNode, SequenceNode

from accel_common.names import VENDOR_RESOURCE
from accel_common.suggest import did_you_mean
from accel_common.yamlread import ProblemsError, Reader
from autoscaler.placement.catalogue import (
    CATALOGUE_PATH,
    DEFAULT_PRECISION,
    PRECISIONS,
    default_catalogue,
)
from autoscaler.simulate.limits import (
    MAX_DEVICES_PER_NODE,
    MAX_ECC_BURST,
    MAX_INT32,
    MAX_NAMESPACES,
    MAX_SAMPLES,
    WORK_LIMITS,
    Ask,
    Work,
    WorkLimits,
    bounded,
    check_faults,
    check_work,
    refuse,
)

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

# ``eligiblePools``: the job's own pool only, or every pool of its vendor.
ELIGIBILITY = ("pool", "vendor")

FAULT_KINDS = ("fatal", "ecc_uncorrected", "device_lost", "hang", "stall", "node_down")
DISTRIBUTIONS = ("lognormal", "exponential", "fixed")

T = TypeVar("T")


class ScenarioError(ProblemsError):
    """A scenario that cannot be run; ``problems`` lists every reason, and ``str()`` is
    one ``file:line:col: message`` per line."""


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

Conv = Callable[[Node, str], "T | None"]


class _Reader(Reader):
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


def load_scenario(
    path: str | Path,
    schedulers: tuple[str, ...] | None = None,
    limits: WorkLimits = WORK_LIMITS,
) -> Scenario:
    """Reads and validates a scenario; raises ``ScenarioError`` naming every problem.
    ``schedulers``: the names a scenario may choose (default: ``SCHEDULERS``);
    ``limits``: the work it may ask for."""
    if schedulers is None:
        from autoscaler.simulate.schedulers import SCHEDULERS

        schedulers = tuple(SCHEDULERS)
    file = str(path)
    r = _Reader(file, limits)
    root = r.load(empty=f"empty file: expected apiVersion: {API_VERSION}, kind: {KIND} and a spec")
    if root is None:
        raise ScenarioError(r.problems)
    top = r.fields(root, "a scenario file", _TOP, required=_TOP)
    scenario: Scenario | None = None
    if top is not None:
        for key, expected in (("apiVersion", API_VERSION), ("kind", KIND)):
            if key in top:
                got = r.value(top[key])
                if got != expected:
                    r.problem(top[key], f"{key} must be {expected!r}, got {got!r}")
        if "spec" in top:
            scenario = _spec(r, top["spec"], Path(file).stem, schedulers)
    if r.problems or scenario is None:
        raise ScenarioError(r.problems)
    return scenario


def _spec(r: _Reader, node: Node, name: str, schedulers: tuple[str, ...]) -> Scenario | None:
    m = r.fields(node, "spec", _SPEC, required=("duration", "pools", "workload"))
    if m is None:
        return None
    duration = r.get(m, "duration", r.period, 86400.0)
    interval = r.get(m, "evaluationInterval", r.period, 15.0)
    seed = r.get(m, "seed", lambda n, w: r.bounded(n, w, 0, 2**64 - 1), 1)
    scrape = r.get(m, "scrapeInterval", r.period, interval)
    if scrape > interval or (interval / scrape) % 1 > 1e-9:
        r.problem(
            m.get("scrapeInterval", node),
            f"scrapeInterval ({scrape:g}s) must divide evaluationInterval ({interval:g}s)",
        )
    scheduler = r.get(m, "scheduler", lambda n, w: r.choice(n, w, schedulers), "first-fit")
    samples = r.get(m, "samples", lambda n, w: r.bounded(n, w, 10, MAX_SAMPLES), 400)
    pools = _pools(r, m["pools"]) if "pools" in m else ()
    workload = _workload(r, m["workload"], pools) if "workload" in m else None
    # The work is checked before the initial nodes are named: a pool of a hundred
    # million nodes must be refused, not listed.
    devices = [max(p.initial, p.max) * p.devices_per_node for p in pools]
    arrivals = workload.arrivals_per_hour if workload is not None else 0.0
    work = Work(duration, scrape, scrape == interval, devices, arrivals)
    small = check_work(r, r.work, m, node, work)
    initial = None
    if small:
        initial = {p.name: tuple(node_name(p.name, i) for i in range(p.initial)) for p in pools}
    faults = _faults(r, m["faults"], pools, initial) if "faults" in m else FaultSpec()
    if small and faults.rates:
        check_faults(r, r.work, m["faults"], work, sum(rate for _, rate in faults.rates))
    if workload is None or initial is None:
        return None
    _check_models(r, m.get("pools", node), pools, workload.precision)
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


def _pools(r: _Reader, node: Node) -> tuple[PoolSpec, ...]:
    if not isinstance(node, SequenceNode) or not node.value:
        r.problem(node, "pools must be a non-empty list of pools")
        return ()
    out: list[PoolSpec] = []
    seen: set[str] = set()
    for item in node.value:
        m = r.fields(item, "a pool", _POOL, required=("name", "vendor", "initial", "max"))
        if m is None:
            continue
        name = r.get(m, "name", r.string, "")
        if name and name in seen:
            r.problem(m.get("name", item), f"pool {name!r} is defined twice")
        seen.add(name)
        vendor = r.get(m, "vendor", lambda n, w: r.choice(n, w, VENDORS), "nvidia")
        model = r.get(m, "model", r.string, DEFAULT_MODEL[vendor])
        per_node = r.get(
            m, "devicesPerNode", lambda n, w: r.bounded(n, w, 1, MAX_DEVICES_PER_NODE), 8
        )
        initial = r.get(m, "initial", r.integer, 0)
        low = r.get(m, "min", r.integer, 0)
        high = r.get(m, "max", lambda n, w: r.integer(n, w, 1), max(initial, 1))
        provision = r.get(m, "provisionTime", r.duration, 600.0)
        topology = r.get(
            m, "topology", lambda n, w: r.choice(n, w, TOPOLOGIES), DEFAULT_TOPOLOGY[vendor]
        )
        if not low <= initial <= high:
            r.problem(
                item, f"pool {name!r}: need min <= initial <= max, got {low}, {initial}, {high}"
            )
        if topology != "pcie" and topology != DEFAULT_TOPOLOGY.get(vendor, topology):
            r.problem(
                m.get("topology", item),
                f"{vendor} devices have no {topology} links (use "
                f"{DEFAULT_TOPOLOGY[vendor]} or pcie)",
            )
        nodes = max(initial, high)
        # The value that asks for the most nodes (a key may be missing: already said).
        at = m.get("initial" if initial > high else "max") or m.get("initial") or item
        what = f"pool {name!r} ({nodes:,} nodes x {per_node} devices)"
        r.over(at, what, nodes * per_node, "devices", "lower its initial and max")
        out.append(PoolSpec(name, vendor, model, per_node, initial, low, high, provision, topology))
    return tuple(out)


def _workload(r: _Reader, node: Node, specs: tuple[PoolSpec, ...]) -> WorkloadSpec | None:
    m = r.fields(node, "workload", _WORKLOAD, required=("arrivalsPerHour", "sizes", "duration"))
    if m is None:
        return None
    pools = {p.name for p in specs}
    rate = r.get(m, "arrivalsPerHour", r.number, 1.0)
    sizes: list[tuple[int, float]] = []
    if "sizes" in m:
        sm = r.fields(m["sizes"], "sizes (devices: weight)", None)
        for k, v in m["sizes"].value if sm is not None else []:
            size = r.integer(k, "a job size (devices)", 1)
            weight = r.number(v, f"the weight of size {k.value}")
            if size is not None and weight is not None:
                sizes.append((size, weight))
        if sm is not None and not sizes:
            r.problem(m["sizes"], "sizes needs at least one entry, e.g. {1: 3, 8: 1}")
        elif sizes and sum(w for _, w in sizes) <= 0:
            r.problem(m["sizes"], "the weights of sizes must not all be 0")
    duration = _duration_spec(r, m["duration"]) if "duration" in m else None
    util = (0.6, 0.95)
    if "utilization" in m:
        um = r.fields(m["utilization"], "utilization", ("min", "max"), required=("min", "max"))
        if um is not None:
            lo = r.get(um, "min", lambda n, w: r.number(n, w, 0.0, 1.0), 0.6)
            hi = r.get(um, "max", lambda n, w: r.number(n, w, 0.0, 1.0), 0.95)
            if lo > hi:
                r.problem(m["utilization"], f"min {lo:g} is above max {hi:g}")
            util = (lo, hi)
    weights: list[tuple[str, float]] = []
    if "pools" in m:
        pm = r.fields(m["pools"], "workload pools (pool: weight)", None)
        for k, v in m["pools"].value if pm is not None else []:
            if not isinstance(k, ScalarNode):
                continue  # reported by fields(): keys must be strings
            if k.value not in pools:
                r.problem(
                    k, f"no pool named {k.value!r}{did_you_mean(str(k.value), sorted(pools))}"
                )
                continue
            w = r.number(v, f"the weight of pool {k.value}")
            if w is not None:
                weights.append((str(k.value), w))
    swing = None
    if "swing" in m:
        wm = r.fields(
            m["swing"], "swing", ("period", "amplitude"), required=("period", "amplitude")
        )
        if wm is not None:
            swing = SwingSpec(
                r.get(wm, "period", r.period, 86400.0),
                r.get(wm, "amplitude", lambda n, w: r.number(n, w, 0.0, 1.0), 0.5),
            )
    pdb = r.get(m, "pdbMaxUnavailable", lambda n, w: r.bounded(n, w, 1, MAX_INT32), None)
    listed: tuple[str, ...]
    eligible, listed = "pool", ()
    if "eligiblePools" in m:
        eligible, listed = _eligible(r, m["eligiblePools"], specs)
    precision = r.get(m, "precision", lambda n, w: r.choice(n, w, PRECISIONS), DEFAULT_PRECISION)
    if duration is None:
        return None
    return WorkloadSpec(
        arrivals_per_hour=rate,
        sizes=tuple(sizes),
        duration=duration,
        checkpoint_interval=r.get(m, "checkpointInterval", r.duration, 1800.0),
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
    )


def _eligible(r: _Reader, node: Node, specs: tuple[PoolSpec, ...]) -> tuple[str, tuple[str, ...]]:
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


def _check_models(r: _Reader, node: Node, pools: tuple[PoolSpec, ...], precision: str) -> None:
    """Every pool's model must have a peak at ``precision`` in the scorer's device
    catalogue: a job's speed on it comes from there."""
    catalogue = default_catalogue()
    where: dict[str, Node] = {}
    for item in node.value if isinstance(node, SequenceNode) else ():
        if isinstance(item, MappingNode):
            keys = {str(k.value): v for k, v in item.value}
            if "name" in keys:
                where[str(r.value(keys["name"]))] = keys.get("model", item)
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


def _duration_spec(r: _Reader, node: Node) -> DurationSpec | None:
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


def _faults(
    r: _Reader,
    node: Node,
    pools: tuple[PoolSpec, ...],
    initial: dict[str, tuple[str, ...]] | None,
) -> FaultSpec:
    """The faults; ``initial`` None (a fleet over the limits, not named) leaves the
    events' nodes unchecked."""
    m = r.fields(node, "faults", _FAULTS)
    if m is None:
        return FaultSpec()
    rates: list[tuple[str, float]] = []
    if "ratesPerDeviceHour" in m:
        rm = r.fields(m["ratesPerDeviceHour"], "ratesPerDeviceHour", FAULT_KINDS)
        for key, v in (rm or {}).items():
            value = r.number(v, f"the rate of {key}", 0.0, 1.0)
            if value is not None:
                rates.append((key, value))
    nodes = None if initial is None else {n: p for p in pools for n in initial.get(p.name, ())}
    events: list[FaultEvent] = []
    if "events" in m:
        ev = m["events"]
        if not isinstance(ev, SequenceNode):
            r.problem(ev, "events must be a list of {at, kind, node, device}")
        else:
            for item in ev.value:
                e = _event(r, item, nodes)
                if e is not None:
                    events.append(e)
    return FaultSpec(
        rates=tuple(rates),
        events=tuple(sorted(events, key=lambda e: e.at)),
        device_lost_recovery=r.get(m, "deviceLostRecovery", r.period, 1800.0),
        node_down_recovery=r.get(m, "nodeDownRecovery", r.period, 3600.0),
        reset_time=r.get(m, "resetTime", r.duration, 300.0),
        ecc_burst=r.get(m, "eccBurst", lambda n, w: r.bounded(n, w, 1, MAX_ECC_BURST), 3),
    )


def _event(r: _Reader, item: Node, nodes: dict[str, PoolSpec] | None) -> FaultEvent | None:
    m = r.fields(
        item, "a fault event", ("at", "kind", "node", "device"), required=("at", "kind", "node")
    )
    if m is None:
        return None
    at = r.get(m, "at", r.duration, None)
    kind = r.get(m, "kind", lambda n, w: r.choice(n, w, FAULT_KINDS), None)
    node = r.get(m, "node", r.string, None)
    if nodes is None:
        return None
    pool = nodes.get(node) if node is not None else None
    if node is not None and pool is None:
        r.problem(
            m["node"],
            f"no initial node named {node!r}{did_you_mean(node, sorted(nodes))}"
            " (nodes are named POOL-NNNN, from 0000)",
        )
    device: int | None = None
    if "device" in m and pool is not None:
        names = [device_name(pool.vendor, i) for i in range(pool.devices_per_node)]
        got = r.value(m["device"])
        if got in names:
            device = names.index(got)
        else:
            r.problem(
                m["device"],
                f"node {node!r} has no device {got!r} (it has {names[0]} to {names[-1]})",
            )
    if kind not in (None, "node_down") and "device" not in m:
        r.problem(
            item,
            f"a {kind} event needs a device (e.g. device: {pool.vendor if pool else 'nvidia'}0)",
        )
        return None
    if at is None or kind is None or node is None or pool is None:
        return None
    return FaultEvent(at, kind, node, device)
