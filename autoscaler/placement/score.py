"""The placement scorer: which node, and which devices on it, for one pod.

A pure function of the pod, the nodes and the fleet state, so that the extender,
``accel-autoscaler place`` and the fleet simulator rank candidates the same way
and a test can pin every decision. Each candidate is a node *and* the concrete
device set the job would get there, because on an 8-GPU node "which four" matters
as much as "which node": four GPUs behind one PCIe switch talk at switch speed,
four spread over two sockets talk across the system.

Hard filters (a node that fails one is rejected, with the reason):

- no taint whose key starts with ``accel-fleet.io/`` (``accel-fleet.io/faulty`` and
  the others this controller sets), and no ``accel-fleet.io/remediation`` annotation;
- enough free, healthy devices of an acceptable vendor and model: the vendor comes
  from the extended resource the pod asks for (``nvidia.com/gpu``, ``amd.com/gpu``,
  ``gpu.intel.com/i915``) narrowed by the ``accel-fleet.io/vendors`` annotation, the
  model from ``accel-fleet.io/models`` (substrings of the exporter's ``model``).

Soft terms, each 0–1 (higher is better), combined by ``Weights``:

- **topology** — the device subset with the smallest total pairwise distance
  (``accel_topology_distance``, 0/10/20/30/40/50) is chosen on each node, exactly
  for small pools and greedily beyond; the term is ``1 - (mean distance - 10) / 40``,
  so an NVLink/xGMI set scores 1, one PCIe switch 0.75, across sockets 0;
- **load** — ``1 - (0.75 * utilization + 0.25 * memory used / total)``, averaged
  over the chosen devices (an unknown reading counts as half busy);
- **locality** — the share of ``key=value`` pairs in the pod annotation
  ``accel-fleet.io/data-location`` that the node's labels carry;
- **runtime** — estimated time to finish: ``accel-fleet.io/flops`` ÷ Σ over the
  chosen devices of (peak FLOP/s at ``accel-fleet.io/precision`` × (1 - utilization)),
  peaks from devices.yaml. The fastest candidate scores 1, the others
  ``fastest / theirs``, so a busy fast device can lose to an idle slower one;
- **fragmentation** — free devices left stranded in islands that were wholly free
  before and that this job would break, at every level of the node's link
  hierarchy (an NVSwitch board is one level, the whole board; a PCIe server has
  switch pairs, host-bridge groups and the whole node):
  ``1 - stranded / (devices on the node × levels)``. A 2-GPU job goes where an
  island is already in use, keeping whole islands and nodes for 8-GPU jobs.

Priority lives in ``schedule_cycle``: pods are placed highest ``spec.priority``
first, and each placement takes its devices out of the state the next pod sees.
"""

from __future__ import annotations

import itertools
import math
import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

from accel_common.names import DATA_LOCATION_ANNOTATION as ANN_DATA_LOCATION
from accel_common.names import FLOPS_ANNOTATION as ANN_FLOPS
from accel_common.names import MODELS_ANNOTATION as ANN_MODELS
from accel_common.names import PRECISION_ANNOTATION as ANN_PRECISION
from accel_common.names import PREFIX as TAINT_PREFIX
from accel_common.names import REMEDIATION_ANNOTATION as ANN_REMEDIATION
from accel_common.names import VENDORS_ANNOTATION as ANN_VENDORS
from accel_common.names import WHOLE_DEVICE_RESOURCES as RESOURCES
from autoscaler.placement.catalogue import (
    DEFAULT_PRECISION,
    PRECISIONS,
    Catalogue,
    default_catalogue,
)

Obj = dict[str, Any]

# The names a pod's accel-fleet.io/vendors annotation may use -> the exporter's
# ``vendor`` label. "intel" is the GPU (oneapi); Intel's Gaudi is "gaudi" or "habana".
VENDOR_ALIASES: dict[str, str] = {
    "nvidia": "nvidia",
    "amd": "amd",
    "oneapi": "oneapi",
    "intel": "oneapi",
    "gaudi": "gaudi",
    "habana": "gaudi",
    "ascend": "ascend",
    "huawei": "ascend",
    "tpu": "tpu",
    "google": "tpu",
}

NEAREST = 10.0  # a device link (NVLink, xGMI, Xe Link, RoCE, HCCS, ICI)
SWITCH = 20.0  # a shared PCIe switch
FARTHEST = 50.0  # across sockets; also what an unknown pair is taken to be
EXACT_LIMIT = 5000  # subsets searched exactly up to this many combinations
IDLE_FLOOR = 0.05  # a fully busy device still gets 5% of its peak in the estimate


class PodRequestError(ValueError):
    """The pod asks for something the scorer cannot read; the message says what."""


@dataclass(frozen=True)
class PodRequest:
    namespace: str
    name: str
    count: int
    vendors: frozenset[str] = frozenset()  # empty: any vendor
    models: tuple[str, ...] = ()  # substrings of the model label; empty: any
    flops: float | None = None
    precision: str = DEFAULT_PRECISION
    data_location: tuple[tuple[str, str], ...] = ()
    priority: int = 0

    @property
    def key(self) -> str:
        return f"{self.namespace}/{self.name}"


@dataclass(frozen=True)
class Device:
    name: str
    vendor: str
    model: str
    healthy: bool = True
    holders: tuple[str, ...] = ()  # pods holding it ("namespace/pod")
    utilization: float | None = None
    memory_used_ratio: float | None = None

    @property
    def free(self) -> bool:
        return not self.holders


@dataclass(frozen=True)
class NodeDevices:
    name: str
    devices: Mapping[str, Device]
    distance: Mapping[tuple[str, str], float] = field(default_factory=dict)

    def dist(self, a: str, b: str) -> float:
        if a == b:
            return 0.0
        return self.distance.get((a, b), self.distance.get((b, a), FARTHEST))


@dataclass(frozen=True)
class FleetState:
    nodes: Mapping[str, NodeDevices]
    at: float = 0.0

    def taking(self, node: str, devices: Iterable[str], holder: str) -> FleetState:
        """The state after ``holder`` took ``devices`` on ``node``."""
        nd = self.nodes[node]
        taken = set(devices)
        devs = {
            name: replace(d, holders=(*d.holders, holder)) if name in taken else d
            for name, d in nd.devices.items()
        }
        nodes = dict(self.nodes)
        nodes[node] = replace(nd, devices=devs)
        return FleetState(nodes, self.at)


@dataclass(frozen=True)
class Weights:
    topology: float = 0.30
    load: float = 0.20
    locality: float = 0.15
    runtime: float = 0.25
    fragmentation: float = 0.10

    def combine(self, t: Terms) -> float:
        pairs = (
            (self.topology, t.topology),
            (self.load, t.load),
            (self.locality, t.locality),
            (self.runtime, t.runtime),
            (self.fragmentation, t.fragmentation),
        )
        total = sum(w for w, _ in pairs)
        return sum(w * v for w, v in pairs) / total if total > 0 else 0.0


@dataclass(frozen=True)
class Terms:
    topology: float
    load: float
    locality: float
    runtime: float
    fragmentation: float


@dataclass(frozen=True)
class Candidate:
    node: str
    devices: tuple[str, ...]
    terms: Terms
    total: float
    distance: float  # sum over the chosen pairs
    est_seconds: float | None
    notes: tuple[str, ...] = ()


@dataclass(frozen=True)
class Rejection:
    node: str
    reason: str
    # Whether freeing devices (preemption) could make the node fit.
    resolvable: bool


@dataclass(frozen=True)
class Ranking:
    candidates: tuple[Candidate, ...]  # best first
    rejected: tuple[Rejection, ...]


# ---------------------------------------------------------------- the pod request


def _split(text: str) -> list[str]:
    return [p.strip() for p in text.split(",") if p.strip()]


def _quantity(value: Any, where: str) -> int:
    try:
        n = int(str(value))
    except ValueError:
        raise PodRequestError(f"{where}: {value!r} is not a whole number of devices") from None
    if n < 0:
        raise PodRequestError(f"{where}: {n} devices is negative")
    return n


def _resource_counts(spec: Mapping[str, Any]) -> dict[str, int]:
    counts: dict[str, int] = {}
    for c in spec.get("containers") or []:
        res = c.get("resources") or {}
        # Extended resources cannot be overcommitted: limits equal requests, and a
        # pod may give either.
        asked = {**(res.get("requests") or {}), **(res.get("limits") or {})}
        for resource, value in asked.items():
            if resource in RESOURCES:
                where = f"container {c.get('name', '?')}: resources {resource}"
                counts[resource] = counts.get(resource, 0) + _quantity(value, where)
    return counts


def _vendors(annotations: Mapping[str, str], counts: Mapping[str, int]) -> frozenset[str]:
    from_resources = {RESOURCES[r] for r, n in counts.items() if n > 0}
    text = annotations.get(ANN_VENDORS, "")
    if not text:
        return frozenset(from_resources)
    named: set[str] = set()
    for v in _split(text):
        if v.lower() not in VENDOR_ALIASES:
            raise PodRequestError(
                f"annotation {ANN_VENDORS}: unknown vendor {v!r} "
                f"(use {', '.join(sorted(VENDOR_ALIASES))})"
            )
        named.add(VENDOR_ALIASES[v.lower()])
    if from_resources and not named & from_resources:
        raise PodRequestError(
            f"annotation {ANN_VENDORS}={text!r} excludes every vendor the pod's resources "
            f"ask for ({', '.join(sorted(from_resources))})"
        )
    return frozenset(named & from_resources if from_resources else named)


def _location(text: str) -> tuple[tuple[str, str], ...]:
    out: list[tuple[str, str]] = []
    for part in _split(text):
        key, sep, value = part.partition("=")
        if not sep or not key:
            raise PodRequestError(
                f"annotation {ANN_DATA_LOCATION}: {part!r} is not LABEL=VALUE "
                "(e.g. topology.kubernetes.io/zone=us-east-1a)"
            )
        out.append((key.strip(), value.strip()))
    return tuple(out)


def pod_request(pod: Mapping[str, Any]) -> PodRequest:
    """Reads what the scorer needs from a Pod object (the API's JSON shape)."""
    meta = pod.get("metadata") or {}
    spec = pod.get("spec") or {}
    ann: Mapping[str, str] = meta.get("annotations") or {}
    counts = _resource_counts(spec)
    flops: float | None = None
    if ANN_FLOPS in ann:
        try:
            flops = float(ann[ANN_FLOPS])
        except ValueError:
            raise PodRequestError(
                f"annotation {ANN_FLOPS}: {ann[ANN_FLOPS]!r} is not a number (e.g. 3.2e18)"
            ) from None
        if not flops > 0 or math.isinf(flops):
            raise PodRequestError(f"annotation {ANN_FLOPS}: must be a positive number of FLOPs")
    precision = ann.get(ANN_PRECISION, DEFAULT_PRECISION).strip().lower()
    if precision not in PRECISIONS:
        raise PodRequestError(
            f"annotation {ANN_PRECISION}: unknown precision {precision!r} "
            f"(use {', '.join(PRECISIONS)})"
        )
    priority = spec.get("priority") or 0
    if not isinstance(priority, int):
        raise PodRequestError(f"spec.priority: {priority!r} is not an integer")
    return PodRequest(
        namespace=str(meta.get("namespace") or "default"),
        name=str(meta.get("name") or meta.get("generateName") or "?"),
        count=sum(counts.values()),
        vendors=_vendors(ann, counts),
        models=tuple(_split(ann.get(ANN_MODELS, ""))),
        flops=flops,
        precision=precision,
        data_location=_location(ann.get(ANN_DATA_LOCATION, "")),
        priority=priority,
    )


# ------------------------------------------------------------------- the scoring


def natural_key(name: str) -> tuple[Any, ...]:
    """nvidia2 before nvidia10."""
    return tuple(int(p) if p.isdigit() else p for p in re.split(r"(\d+)", name))


def _acceptable(req: PodRequest, d: Device) -> bool:
    if req.vendors and d.vendor not in req.vendors:
        return False
    model = d.model.lower()
    return not req.models or any(m.lower() in model for m in req.models)


def islands(nd: NodeDevices, limit: float | None = None) -> list[frozenset[str]]:
    """Groups of devices joined by pairs at distance ≤ ``limit``; by default the
    node's closest link (NVLink/xGMI islands, or PCIe switch pairs on a node
    without device links): what a large job wants whole."""
    names = sorted(nd.devices, key=natural_key)
    if limit is None:
        limit = min(levels(nd), default=NEAREST)
    parent = {n: n for n in names}

    def root(n: str) -> str:
        while parent[n] != n:
            parent[n] = parent[parent[n]]
            n = parent[n]
        return n

    for a, b in itertools.combinations(names, 2):
        if nd.dist(a, b) <= limit:
            parent[root(a)] = root(b)
    groups: dict[str, set[str]] = {}
    for n in names:
        groups.setdefault(root(n), set()).add(n)
    return [frozenset(g) for g in groups.values()]


def levels(nd: NodeDevices) -> list[float]:
    """The distinct distances between the node's devices, closest first: the
    levels of its link hierarchy (10 on an NVSwitch board; 20, 30, 50 on a PCIe
    server with switches, host bridges and two sockets)."""
    return sorted({nd.dist(a, b) for a, b in itertools.combinations(nd.devices, 2)})


def whole_free_islands(nd: NodeDevices) -> list[list[frozenset[str]]]:
    """Per level, the islands whose devices are all free and healthy."""
    out = []
    for limit in levels(nd) or [NEAREST]:
        out.append(
            [
                g
                for g in islands(nd, limit)
                if all(nd.devices[x].free and nd.devices[x].healthy for x in g)
            ]
        )
    return out


def _busy(d: Device) -> float:
    util = 0.5 if d.utilization is None else d.utilization
    mem = 0.5 if d.memory_used_ratio is None else d.memory_used_ratio
    return min(1.0, max(0.0, 0.75 * util + 0.25 * mem))


def _stranded(chosen: Iterable[str], whole: Sequence[Sequence[frozenset[str]]]) -> int:
    """Free devices left in islands (at every level) that were whole before and
    that ``chosen`` breaks."""
    picked = set(chosen)
    return sum(len(g - picked) for level in whole for g in level if g & picked)


def _pair_sum(nd: NodeDevices, devs: Sequence[str]) -> float:
    return sum(nd.dist(a, b) for a, b in itertools.combinations(devs, 2))


def choose_devices(nd: NodeDevices, pool: Sequence[str], n: int) -> tuple[str, ...]:
    """The ``n`` devices of ``pool`` with the smallest total pairwise distance; ties
    go to the set that strands fewer devices of whole free islands, then to the
    less busy set, then to the lower names. Exact while the number of subsets is
    small (8 devices choose 4 is 70), greedy from every seed beyond that."""
    pool = sorted(pool, key=natural_key)
    free_whole = whole_free_islands(nd)

    def key(devs: Sequence[str]) -> tuple[float, int, float, tuple[Any, ...]]:
        return (
            _pair_sum(nd, devs),
            _stranded(devs, free_whole),
            round(sum(_busy(nd.devices[d]) for d in devs), 6),
            tuple(natural_key(d) for d in devs),
        )

    if n <= 0:
        return ()
    if math.comb(len(pool), n) <= EXACT_LIMIT:
        best = min(itertools.combinations(pool, n), key=key)
        return tuple(best)
    sets: list[tuple[str, ...]] = []
    for seed in pool:
        chosen = [seed]
        rest = [d for d in pool if d != seed]
        while len(chosen) < n:
            nxt = min(
                rest,
                key=lambda d: (sum(nd.dist(d, c) for c in chosen), _busy(nd.devices[d])),
            )
            chosen.append(nxt)
            rest.remove(nxt)
        sets.append(tuple(sorted(chosen, key=natural_key)))
    return min(sets, key=key)


def _node_obj(node: Obj | str) -> Obj:
    return {"metadata": {"name": node}} if isinstance(node, str) else node


def _hard_filter(node: Obj) -> str | None:
    meta = node.get("metadata") or {}
    for taint in (node.get("spec") or {}).get("taints") or []:
        key = str(taint.get("key", ""))
        if key.startswith(TAINT_PREFIX):
            value = taint.get("value")
            shown = f"{key}={value}" if value else key
            return f"tainted {shown}:{taint.get('effect', '')} (a device fault or remediation)"
    if ANN_REMEDIATION in (meta.get("annotations") or {}):
        return f"under remediation (annotation {ANN_REMEDIATION})"
    return None


@dataclass(frozen=True)
class _Fit:
    node: str
    devices: tuple[str, ...]
    terms: Terms  # runtime still unnormalized (filled in once all are known)
    distance: float
    est_seconds: float | None
    notes: tuple[str, ...]


def _describe(req: PodRequest) -> str:
    vendors = "/".join(sorted(req.vendors)) or "any-vendor"
    models = f" of model {'/'.join(req.models)}" if req.models else ""
    return f"{vendors} devices{models}"


def _estimate(
    req: PodRequest, nd: NodeDevices, devs: Sequence[str], catalogue: Catalogue
) -> tuple[float | None, str | None]:
    if req.flops is None:
        return None, None
    rate = 0.0
    for name in devs:
        d = nd.devices[name]
        peak = catalogue.peak(d.model, req.precision)
        if peak is None:
            return None, f"no {req.precision} peak for model {d.model!r} in devices.yaml"
        util = 0.5 if d.utilization is None else d.utilization
        rate += peak * max(IDLE_FLOOR, 1.0 - util)
    return req.flops / rate, None


def _fit(req: PodRequest, node: Obj, fleet: FleetState, catalogue: Catalogue) -> _Fit | Rejection:
    name = str((node.get("metadata") or {}).get("name", ""))
    why = _hard_filter(node)
    if why is not None:
        return Rejection(name, why, resolvable=False)
    nd = fleet.nodes.get(name)
    if nd is None:
        return Rejection(
            name,
            "no device metrics for this node (is accel-exporter running there, with the "
            "node label set by relabeling or --targets?)",
            resolvable=False,
        )
    usable = [d for d in nd.devices.values() if _acceptable(req, d) and d.healthy]
    pool = [d.name for d in usable if d.free]
    if len(usable) < req.count:
        return Rejection(
            name,
            f"has {len(usable)} healthy {_describe(req)}, the pod needs {req.count}",
            resolvable=False,
        )
    if len(pool) < req.count:
        return Rejection(
            name,
            f"{len(pool)} of {len(usable)} healthy {_describe(req)} are free, "
            f"the pod needs {req.count}",
            resolvable=True,
        )
    devs = choose_devices(nd, pool, req.count)
    distance = _pair_sum(nd, devs)
    pairs = math.comb(len(devs), 2)
    topology = 1.0
    if pairs:
        mean = distance / pairs
        topology = min(1.0, max(0.0, 1.0 - (mean - NEAREST) / (FARTHEST - NEAREST)))
    load = 1.0 - sum(_busy(nd.devices[d]) for d in devs) / len(devs) if devs else 1.0
    labels: Mapping[str, str] = (node.get("metadata") or {}).get("labels") or {}
    locality = 1.0
    if req.data_location:
        hits = sum(1 for k, v in req.data_location if labels.get(k) == v)
        locality = hits / len(req.data_location)
    whole = whole_free_islands(nd)
    fragmentation = 1.0 - _stranded(devs, whole) / max(1, len(nd.devices) * len(whole))
    est, note = _estimate(req, nd, devs, catalogue)
    terms = Terms(topology, load, locality, 0.0, fragmentation)
    return _Fit(name, devs, terms, distance, est, (note,) if note else ())


def score(
    request: PodRequest,
    nodes: Sequence[Obj | str],
    fleet: FleetState,
    weights: Weights | None = None,
    catalogue: Catalogue | None = None,
) -> Ranking:
    """Every node that can take the pod, best first, each with its device set and
    its terms; every other node with the reason it cannot."""
    weights = weights or Weights()
    catalogue = catalogue or default_catalogue()
    fits: list[_Fit] = []
    rejected: list[Rejection] = []
    for node in nodes:
        got = _fit(request, _node_obj(node), fleet, catalogue)
        if isinstance(got, Rejection):
            rejected.append(got)
        else:
            fits.append(got)
    known = [f.est_seconds for f in fits if f.est_seconds is not None]
    fastest = min(known) if known else None
    candidates: list[Candidate] = []
    for f in fits:
        if request.flops is None:
            runtime = 1.0
        elif f.est_seconds is None or fastest is None:
            runtime = 0.0
        else:
            runtime = fastest / f.est_seconds
        terms = replace(f.terms, runtime=runtime)
        candidates.append(
            Candidate(
                f.node,
                f.devices,
                terms,
                weights.combine(terms),
                f.distance,
                f.est_seconds,
                f.notes,
            )
        )
    candidates.sort(key=lambda c: (-round(c.total, 9), natural_key(c.node)))
    return Ranking(tuple(candidates), tuple(rejected))


@dataclass(frozen=True)
class Placement:
    request: PodRequest
    candidate: Candidate | None  # None: nothing fits this cycle
    ranking: Ranking


def schedule_cycle(
    requests: Sequence[PodRequest],
    nodes: Sequence[Obj | str],
    fleet: FleetState,
    weights: Weights | None = None,
    catalogue: Catalogue | None = None,
) -> tuple[list[Placement], FleetState]:
    """Places pods highest priority first (ties keep their order); each placement
    takes its devices out of the state that the next pod is scored against.
    Returns the placements in the order they were made and the final state."""
    order = sorted(range(len(requests)), key=lambda i: (-requests[i].priority, i))
    out: list[Placement] = []
    for i in order:
        req = requests[i]
        ranking = score(req, nodes, fleet, weights, catalogue)
        best = ranking.candidates[0] if ranking.candidates else None
        if best is not None:
            fleet = fleet.taking(best.node, best.devices, req.key)
        out.append(Placement(req, best, ranking))
    return out, fleet


def parse_weights(pairs: Sequence[str]) -> Weights:
    values: dict[str, float] = {}
    fields = set(Weights.__dataclass_fields__)
    for pair in pairs:
        name, sep, value = pair.partition("=")
        if not sep or name not in fields:
            raise ValueError(f"bad --weight {pair!r} (use NAME=W, NAME one of {sorted(fields)})")
        try:
            w = float(value)
        except ValueError:
            raise ValueError(f"bad --weight {pair!r}: {value!r} is not a number") from None
        if w < 0:
            raise ValueError(f"bad --weight {pair!r}: weights are not negative")
        values[name] = w
    return Weights(**values)
