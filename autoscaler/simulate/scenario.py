"""Scenario files: the fleet, its workload and its faults, as YAML.

A scenario says everything the simulation needs except the rules, so that one
scenario can be run against any rule set and the baseline::

    apiVersion: accel-fleet/v1
    kind: Scenario
    spec:
      duration: 24h
      evaluationInterval: 60s       # the controller's cycle
      telemetry:                    # how samples reach it (pipeline.py); the deploy's
        source: prometheus          # prometheus | scrape | alertmanager
        pollInterval: 5s            # the exporter's
        scrapeInterval: 15s         # Prometheus's
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
        classes:                     # each kind's action class (classes.py)
          fatal: {reset: 6, reboot: 3, isolate: 1}
        events:
          - {at: 2h, kind: fatal, node: h100-0001, device: nvidia3, action: reboot}
      repairs:                       # fatal faults then need a repair (repairs.py)
        selfHeals: 0.1               # share that heals on its own once the device is free
        reset: {fixes: 0.6, duration: 3m}
        reboot: {fixes: 0.8, duration: 10m}
        replace: {duration: 45m}

A ``kueue`` section runs Kueue in the cluster: its reader, ``scenario_kueue.py``,
says what it declares.

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

from dataclasses import dataclass, field
from pathlib import Path

from yaml.nodes import MappingNode, Node, SequenceNode

from accel_common.remedies import ActionClass
from accel_common.suggest import did_you_mean
from accel_common.yamlread import ProblemsError
from autoscaler.placement.catalogue import (
    CATALOGUE_PATH,
    default_catalogue,
)
from autoscaler.simulate.classes import ClassMix, default_mixes, read_action, read_classes
from autoscaler.simulate.feasible import check_feasible
from autoscaler.simulate.limits import (
    MAX_DEVICES_PER_NODE,
    MAX_ECC_BURST,
    MAX_SAMPLES,
    WORK_LIMITS,
    Work,
    WorkLimits,
    check_faults,
    check_work,
)
from autoscaler.simulate.pipeline import TelemetrySpec, read_telemetry
from autoscaler.simulate.scenario_kueue import KueueSpec, read_kueue
from autoscaler.simulate.scenario_workload import ScenarioReader, WorkloadSpec, read_workload

API_VERSION = "accel-fleet/v1"
KIND = "Scenario"

VENDORS = ("nvidia", "amd", "oneapi", "gaudi", "ascend", "tpu")
# How each vendor's devices are wired inside a node unless a pool says otherwise:
# NVSwitch boards, MI300X OAM platforms, Gaudi HLS boards (RoCE all-to-all) and
# Ascend servers (HCCS full mesh) connect every pair, as do a TPU host's chips over
# ICI; an Intel node (and any pool with ``topology: pcie``) has only the PCIe tree.
DEFAULT_TOPOLOGY = {
    "nvidia": "nvlink",
    "amd": "xgmi",
    "oneapi": "pcie",
    "gaudi": "roce",
    "ascend": "hccs",
    "tpu": "ici",
}
TOPOLOGIES = ("nvlink", "xgmi", "roce", "hccs", "ici", "pcie")
# The model each vendor's pools get unless they name one: what the exporter's sim
# backend imitates (exporter/backends/sim_models.py), each in the placement catalogue.
DEFAULT_MODEL = {
    "nvidia": "NVIDIA H100 80GB HBM3",
    "amd": "AMD Instinct MI300X",
    "oneapi": "Intel(R) Data Center GPU Max 1550",
    "gaudi": "HL-325L",
    "ascend": "Ascend910B3",
    "tpu": "TPU v5e",
}

# ``deviceReadyDelay`` unless a pool says otherwise: the 60-90 s a GPU node was seen
# to take from Ready to allocatable GPUs under an autoscaler (NVIDIA/k8s-device-plugin
# issue 291: "approximately 90 seconds"; about a minute on GKE, Karpenter's GCP
# provider PR 148), with the driver on the node image. A driver the GPU Operator
# builds at boot takes minutes more: say so per pool. At most a day.
DEVICE_READY_DELAY = 90.0
MAX_DEVICE_READY_DELAY = 86400.0

FAULT_KINDS = (
    "fatal",
    "ecc_uncorrected",
    "device_lost",
    "hang",
    "stall",
    "node_down",
    "remap_pending",
    "remap_failure",
    "app",
    "collective_hang",
)


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
    # How long a new node is Ready before its devices are allocatable (its device
    # plugin registering); whether its MachineDeployment carries the capacity
    # annotations that let the controller scale it from zero (poolshape.py).
    device_ready_delay: float = DEVICE_READY_DELAY
    capacity_annotations: bool = True


@dataclass(frozen=True)
class FaultEvent:
    at: float
    kind: str
    node: str
    device: int | None  # index within the node; None for node_down
    action: ActionClass | None = None  # None: drawn from the kind's classes


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
    # Each kind's action class, or weights over its classes (classes.py).
    classes: dict[str, ClassMix] = field(default_factory=default_mixes)


@dataclass(frozen=True)
class RepairStep:
    """One repair the node agent or Cluster API carries out: it takes ``duration``
    and fixes a fault that needs repair with probability ``fixes``."""

    fixes: float
    duration: float


@dataclass(frozen=True)
class RepairSpec:
    """``repairs``: what a reset, a reboot and a machine replacement do to the
    faults that need one (``autoscaler/simulate/repairs.py``). ``needed`` is False
    when the scenario has no ``repairs``: every fault then heals on its own as it
    always has (a device ``resetTime`` after its job left it), and the emulated
    agent and Cluster API still answer the actions, with these defaults."""

    needed: bool = False
    self_heals: float = 0.0
    reset: RepairStep = RepairStep(0.6, 180.0)
    reboot: RepairStep = RepairStep(0.8, 600.0)
    replace: RepairStep = RepairStep(1.0, 2700.0)


@dataclass(frozen=True)
class Scenario:
    name: str
    duration: float
    evaluation_interval: float
    seed: int
    pools: tuple[PoolSpec, ...]
    workload: WorkloadSpec
    faults: FaultSpec
    scheduler: str = "first-fit"
    # Points in the plots' timelines.
    samples: int = 400
    source: str = "<scenario>"
    repairs: RepairSpec = RepairSpec()
    initial_nodes: dict[str, tuple[str, ...]] = field(default_factory=dict)
    # How the fleet's series reach the controller (pipeline.py).
    telemetry: TelemetrySpec = field(default_factory=TelemetrySpec)
    # The cluster's Kueue (scenario_kueue.py, kueue.py); None: no Kueue.
    kueue: KueueSpec | None = None


def node_name(pool: str, index: int) -> str:
    """The name of a pool's ``index``-th node, as the scenario's events name it."""
    return f"{pool}-{index:04d}"


def device_name(vendor: str, index: int) -> str:
    """The exporter's device name (``nvidia3``)."""
    return f"{vendor}{index}"


# -- reading ---------------------------------------------------------------------


_TOP = ("apiVersion", "kind", "spec")
_SPEC = (
    "duration",
    "evaluationInterval",
    "scrapeInterval",  # moved to telemetry: read only to say so
    "telemetry",
    "seed",
    "scheduler",
    "samples",
    "pools",
    "workload",
    "faults",
    "repairs",
    "kueue",
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
    "deviceReadyDelay",
    "capacityAnnotations",
)
_FAULTS = (
    "ratesPerDeviceHour",
    "events",
    "deviceLostRecovery",
    "nodeDownRecovery",
    "resetTime",
    "eccBurst",
    "classes",
)
_REPAIRS = ("selfHeals", "reset", "reboot", "replace")
# The longest a repair may take: a replacement that takes a week is a purchase.
MAX_REPAIR_DURATION = 7 * 86400.0


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
    r = ScenarioReader(file, limits)
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


def _spec(r: ScenarioReader, node: Node, name: str, schedulers: tuple[str, ...]) -> Scenario | None:
    m = r.fields(node, "spec", _SPEC, required=("duration", "pools", "workload"))
    if m is None:
        return None
    duration = r.get(m, "duration", r.period, 86400.0)
    interval = r.get(m, "evaluationInterval", r.period, 15.0)
    seed = r.get(m, "seed", lambda n, w: r.bounded(n, w, 0, 2**64 - 1), 1)
    telemetry, passes = read_telemetry(r, m, node, interval)
    scheduler = r.get(m, "scheduler", lambda n, w: r.choice(n, w, schedulers), "first-fit")
    samples = r.get(m, "samples", lambda n, w: r.bounded(n, w, 10, MAX_SAMPLES), 400)
    pools = _pools(r, m["pools"]) if "pools" in m else ()
    workload = read_workload(r, m["workload"], pools) if "workload" in m else None
    # The work is checked before the initial nodes are named: a pool of a hundred
    # million nodes must be refused, not listed.
    devices = [max(p.initial, p.max) * p.devices_per_node for p in pools]
    arrivals = workload.arrivals_per_hour if workload is not None else 0.0
    work = Work(duration, passes, devices, arrivals)
    small = check_work(r, r.work, m, node, work)
    initial = None
    if small:
        initial = {p.name: tuple(node_name(p.name, i) for i in range(p.initial)) for p in pools}
    faults = _faults(r, m["faults"], pools, initial) if "faults" in m else FaultSpec()
    repairs = _repairs(r, m["repairs"]) if "repairs" in m else RepairSpec()
    names = tuple(p.name for p in pools)
    kueue = read_kueue(r, m["kueue"], names, workload) if "kueue" in m else None
    if small and faults.rates:
        check_faults(r, r.work, m["faults"], work, sum(rate for _, rate in faults.rates))
    if workload is None or initial is None:
        return None
    _check_models(r, m.get("pools", node), pools, workload.precision)
    if pools and workload is not None:
        for p in pools:
            per = p.devices_per_node
            too_big = [
                s for s, _ in workload.sizes if s > per and (workload.gang_kind is None or s % per)
            ]
            if too_big and (not workload.pools or p.name in dict(workload.pools)):
                how = (
                    f"a gang takes whole nodes: use a multiple of {per}"
                    if workload.gang_kind
                    else "set gangKind (jobset or pytorchjob) to run it as a gang of whole nodes"
                )
                r.problem(
                    m["workload"],
                    f"job size {too_big[0]} does not fit pool {p.name!r} "
                    f"({per} devices per node); {how}",
                )
        check_feasible(r, m, pools, workload)
    return Scenario(
        name=name,
        duration=duration,
        evaluation_interval=interval,
        seed=seed,
        pools=pools,
        workload=workload,
        faults=faults,
        scheduler=scheduler,
        samples=samples,
        source=r.file,
        initial_nodes=initial,
        repairs=repairs,
        telemetry=telemetry,
        kueue=kueue,
    )


def _pools(r: ScenarioReader, node: Node) -> tuple[PoolSpec, ...]:
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
        high = r.get(m, "max", lambda n, w: r.integer(n, w, 0), max(initial, 1))
        provision = r.get(m, "provisionTime", r.duration, 600.0)
        topology = r.get(
            m, "topology", lambda n, w: r.choice(n, w, TOPOLOGIES), DEFAULT_TOPOLOGY[vendor]
        )
        device_delay = r.get(
            m,
            "deviceReadyDelay",
            lambda n, w: r.duration(n, w, maximum=MAX_DEVICE_READY_DELAY),
            DEVICE_READY_DELAY,
        )
        annotated = r.get(m, "capacityAnnotations", r.boolean, True)
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
        out.append(
            PoolSpec(
                name,
                vendor,
                model,
                per_node,
                initial,
                low,
                high,
                provision,
                topology,
                device_delay,
                annotated,
            )
        )
    return tuple(out)


def _check_models(
    r: ScenarioReader, node: Node, pools: tuple[PoolSpec, ...], precision: str
) -> None:
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


def _faults(
    r: ScenarioReader,
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
        classes=read_classes(r, m["classes"]) if "classes" in m else default_mixes(),
    )


def _repairs(r: ScenarioReader, node: Node) -> RepairSpec:
    """``repairs: {selfHeals, reset: {fixes, duration}, reboot: {fixes, duration},
    replace: {duration}}``; a missing key keeps ``RepairSpec``'s default."""
    m = r.fields(node, "repairs", _REPAIRS)
    if m is None:
        return RepairSpec(needed=True)
    base = RepairSpec()
    share = r.get(m, "selfHeals", lambda n, w: r.number(n, w, 0.0, 1.0), base.self_heals)
    steps: dict[str, RepairStep] = {}
    for key, default in (("reset", base.reset), ("reboot", base.reboot), ("replace", base.replace)):
        keys = ("duration",) if key == "replace" else ("fixes", "duration")
        step = r.fields(m[key], f"repairs.{key}", keys) if key in m else {}
        if step is None:
            steps[key] = default
            continue
        fixes = r.get(step, "fixes", lambda n, w: r.number(n, w, 0.0, 1.0), default.fixes)
        duration = r.get(
            step,
            "duration",
            lambda n, w: r.duration(n, w, maximum=MAX_REPAIR_DURATION),
            default.duration,
        )
        steps[key] = RepairStep(fixes, duration)
    return RepairSpec(True, share, steps["reset"], steps["reboot"], steps["replace"])


def _event(r: ScenarioReader, item: Node, nodes: dict[str, PoolSpec] | None) -> FaultEvent | None:
    m = r.fields(
        item,
        "a fault event",
        ("at", "kind", "node", "device", "action"),
        required=("at", "kind", "node"),
    )
    if m is None:
        return None
    at = r.get(m, "at", r.duration, None)
    kind = r.get(m, "kind", lambda n, w: r.choice(n, w, FAULT_KINDS), None)
    node = r.get(m, "node", r.string, None)
    action = read_action(r, m["action"], kind) if "action" in m else None
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
    return FaultEvent(at, kind, node, device, action)
