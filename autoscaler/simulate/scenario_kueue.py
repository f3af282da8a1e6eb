"""The ``kueue`` section of a scenario: the ClusterQueues, LocalQueues and
``waitForPodsReady`` settings of the Kueue that the simulated cluster runs
(``kueue.py``)::

    kueue:
      waitForPodsReady: {timeout: 10m, blockAdmission: true,
                         requeuingBackoff: {base: 60s, max: 1h}}
      clusterQueues:
        - name: team-a
          cohort: research
          fairSharing: {weight: 2}
          queueingStrategy: BestEffortFIFO      # or StrictFIFO
          flavors:                              # one ResourceFlavor per pool
            h100: {nominalQuota: 32, borrowingLimit: 16, lendingLimit: 16}
      localQueues:
        - {name: team-a, namespace: team-a, clusterQueue: team-a, share: 2}

Why a module of its own: the section is Kueue's configuration and API objects in
Kueue's own field names (``Configuration.waitForPodsReady``, ClusterQueue
``spec.cohort``, ``spec.fairSharing.weight``, ``spec.queueingStrategy``,
``resourceGroups[].flavors[].resources[].{nominalQuota, borrowingLimit,
lendingLimit}``, LocalQueue ``spec.clusterQueue``), apart from the workload it
queues; it uses ``scenario.py``'s reader and reports problems the same way.

A flavor is named by the pool whose nodes it selects (its ``nodeLabels`` are the
pool's label) and its quotas are in that pool's devices. With ``kueue`` present
every job is Kueue-managed: its namespace is drawn from the LocalQueues, each in
proportion to its ``share`` (default 1), instead of ``workload.namespaces``, and
every pool a job can be drawn for must have a flavor in every ClusterQueue (a job
whose ClusterQueue has no quota for its pool could never start). Jobs stay on the
pool they are drawn for (``eligiblePools: pool``): a flavor is a pool.
"""

from __future__ import annotations

from dataclasses import dataclass

from yaml.nodes import Node

from accel_common.suggest import did_you_mean
from autoscaler.simulate.limits import MAX_CLUSTER_QUEUES, MAX_LOCAL_QUEUES, MAX_QUOTA
from autoscaler.simulate.scenario_workload import ScenarioReader, WorkloadSpec

STRATEGIES = ("BestEffortFIFO", "StrictFIFO")
# Kueue's defaults (Configuration.waitForPodsReady): a 5-minute timeout, requeuing
# backoff from 60 s doubling up to an hour.
DEFAULT_TIMEOUT = 300.0
DEFAULT_BACKOFF_BASE = 60.0
DEFAULT_BACKOFF_MAX = 3600.0
MAX_WEIGHT = 1_000_000.0
MAX_WAIT = 7 * 86400.0

_KUEUE = ("waitForPodsReady", "clusterQueues", "localQueues")
_READY = ("timeout", "blockAdmission", "requeuingBackoff")
_BACKOFF = ("base", "max")
_CQ = ("name", "cohort", "fairSharing", "queueingStrategy", "flavors")
_FAIR = ("weight",)
_QUOTA = ("nominalQuota", "borrowingLimit", "lendingLimit")
_LQ = ("name", "namespace", "clusterQueue", "share")


@dataclass(frozen=True)
class FlavorQuota:
    """A ClusterQueue's quota on one flavor (pool), in devices; None: no limit."""

    nominal: int
    borrowing: int | None = None
    lending: int | None = None


@dataclass(frozen=True)
class ClusterQueueSpec:
    name: str
    cohort: str
    weight: float  # fairSharing.weight
    strategy: str  # queueingStrategy
    flavors: tuple[tuple[str, FlavorQuota], ...]  # pool -> quota, in order

    def quota(self, pool: str) -> FlavorQuota | None:
        return dict(self.flavors).get(pool)


@dataclass(frozen=True)
class LocalQueueSpec:
    name: str
    namespace: str
    cluster_queue: str
    share: float = 1.0  # the weight of its namespace among arriving jobs


@dataclass(frozen=True)
class PodsReadySpec:
    """Kueue's ``waitForPodsReady``: evict a Workload whose pods are not all Ready
    ``timeout`` after admission, requeued after ``base x 2^(n-1)`` (at most
    ``max``) for its n-th requeue; ``block``: admit nothing while an admitted
    Workload's pods are not all Ready."""

    timeout: float = DEFAULT_TIMEOUT
    block: bool = True
    backoff_base: float = DEFAULT_BACKOFF_BASE
    backoff_max: float = DEFAULT_BACKOFF_MAX

    def backoff(self, count: int) -> float:
        """The wait before the ``count``-th requeue (1 for the first)."""
        return float(min(self.backoff_max, self.backoff_base * 2.0 ** max(0, count - 1)))


@dataclass(frozen=True)
class KueueSpec:
    cluster_queues: tuple[ClusterQueueSpec, ...]
    local_queues: tuple[LocalQueueSpec, ...]
    pods_ready: PodsReadySpec | None = None

    def queue_of(self, namespace: str) -> LocalQueueSpec | None:
        for lq in self.local_queues:
            if lq.namespace == namespace:
                return lq
        return None


def read_kueue(
    r: ScenarioReader, node: Node, pools: tuple[str, ...], workload: WorkloadSpec | None
) -> KueueSpec | None:
    """The ``kueue`` section; None (problems reported) when it cannot be used.
    ``pools``: the scenario's pool names; ``workload``: for the pools jobs are drawn
    for and their ``eligiblePools``."""
    m = r.fields(node, "kueue", _KUEUE, required=("clusterQueues", "localQueues"))
    if m is None:
        return None
    ready = _pods_ready(r, m["waitForPodsReady"]) if "waitForPodsReady" in m else None
    cqs = _cluster_queues(r, m["clusterQueues"], pools) if "clusterQueues" in m else ()
    names = tuple(cq.name for cq in cqs)
    lqs = _local_queues(r, m["localQueues"], names) if "localQueues" in m else ()
    if "localQueues" in m and not lqs:
        r.problem(m["localQueues"], "kueue.localQueues must list at least one LocalQueue")
    if workload is not None:
        if workload.eligible != "pool":
            r.problem(
                node, "kueue: a flavor is a pool; jobs must stay on theirs (eligiblePools: pool)"
            )
        drawn = [p for p, w in workload.pools if w > 0] if workload.pools else list(pools)
        for cq in cqs:
            missing = [p for p in drawn if cq.quota(p) is None]
            if missing:
                r.problem(
                    m["clusterQueues"],
                    f"ClusterQueue {cq.name!r} has no flavor for pool {missing[0]!r}, which "
                    "jobs are drawn for: give it a quota there (nominalQuota: 0 to borrow only)",
                )
    if r.problems or not cqs or not lqs:
        return None
    return KueueSpec(cqs, lqs, ready)


def _pods_ready(r: ScenarioReader, node: Node) -> PodsReadySpec | None:
    m = r.fields(node, "kueue.waitForPodsReady", _READY)
    if m is None:
        return None
    timeout = r.get(
        m, "timeout", lambda n, w: r.duration(n, w, minimum=1.0, maximum=MAX_WAIT), DEFAULT_TIMEOUT
    )
    block = r.get(m, "blockAdmission", r.boolean, True)
    base, most = DEFAULT_BACKOFF_BASE, DEFAULT_BACKOFF_MAX
    if "requeuingBackoff" in m:
        b = r.fields(m["requeuingBackoff"], "waitForPodsReady.requeuingBackoff", _BACKOFF)
        if b is not None:
            span = lambda n, w: r.duration(n, w, minimum=1.0, maximum=MAX_WAIT)  # noqa: E731
            base = r.get(b, "base", span, DEFAULT_BACKOFF_BASE)
            most = r.get(b, "max", span, DEFAULT_BACKOFF_MAX)
            if base > most:
                r.problem(m["requeuingBackoff"], "requeuingBackoff: base must not exceed max")
    return PodsReadySpec(timeout, block, base, most)


def _cluster_queues(
    r: ScenarioReader, node: Node, pools: tuple[str, ...]
) -> tuple[ClusterQueueSpec, ...]:
    items = r.sequence(node, "kueue.clusterQueues", "a list of ClusterQueues")
    if items is None:
        return ()
    if not items:
        r.problem(node, "kueue.clusterQueues must list at least one ClusterQueue")
    if len(items) > MAX_CLUSTER_QUEUES:
        r.problem(node, f"kueue.clusterQueues: at most {MAX_CLUSTER_QUEUES}, got {len(items)}")
        return ()
    out: list[ClusterQueueSpec] = []
    seen: set[str] = set()
    for item in items:
        m = r.fields(item, "a ClusterQueue", _CQ, required=("name", "flavors"))
        if m is None:
            continue
        name = r.get(m, "name", r.string, "")
        if name in seen:
            r.problem(m["name"], f"ClusterQueue {name!r} is defined twice")
        seen.add(name)
        cohort = r.get(m, "cohort", r.string, "")
        weight = 1.0
        if "fairSharing" in m:
            f = r.fields(m["fairSharing"], "fairSharing", _FAIR)
            if f is not None:
                weight = r.get(f, "weight", lambda n, w: r.number(n, w, 1e-6, MAX_WEIGHT), 1.0)
        strategy = r.get(
            m, "queueingStrategy", lambda n, w: r.choice(n, w, STRATEGIES), STRATEGIES[0]
        )
        flavors = _flavors(r, m["flavors"], pools, name, bool(cohort)) if "flavors" in m else ()
        out.append(ClusterQueueSpec(name, cohort, weight, strategy, flavors))
    return tuple(out)


def _flavors(
    r: ScenarioReader, node: Node, pools: tuple[str, ...], queue: str, cohort: bool
) -> tuple[tuple[str, FlavorQuota], ...]:
    entries = r.mapping(node, f"ClusterQueue {queue!r} flavors", None)
    if entries is None:
        return ()
    if not entries:
        r.problem(node, f"ClusterQueue {queue!r}: flavors must name at least one pool")
    out: list[tuple[str, FlavorQuota]] = []
    count = lambda n, w: r.integer(n, w, 0, maximum=MAX_QUOTA)  # noqa: E731
    for pool, (key, value) in entries.items():
        if pool not in pools:
            r.problem(
                key,
                f"ClusterQueue {queue!r}: no pool {pool!r}{did_you_mean(pool, pools)} "
                f"(a flavor is a pool: {', '.join(pools)})",
            )
            continue
        q = r.fields(value, f"the quota of {queue}/{pool}", _QUOTA, required=("nominalQuota",))
        if q is None:
            continue
        nominal = r.get(q, "nominalQuota", count, 0)
        borrowing = r.get(q, "borrowingLimit", count, None)
        lending = r.get(q, "lendingLimit", count, None)
        if borrowing is not None and not cohort:
            r.problem(q["borrowingLimit"], f"ClusterQueue {queue!r}: borrowingLimit needs a cohort")
        if lending is not None and lending > nominal:
            r.problem(
                q["lendingLimit"],
                f"ClusterQueue {queue!r}: lendingLimit {lending} exceeds nominalQuota {nominal}",
            )
        out.append((pool, FlavorQuota(nominal, borrowing, lending)))
    return tuple(out)


def _local_queues(
    r: ScenarioReader, node: Node, queues: tuple[str, ...]
) -> tuple[LocalQueueSpec, ...]:
    items = r.sequence(node, "kueue.localQueues", "a list of LocalQueues")
    if items is None:
        return ()
    if len(items) > MAX_LOCAL_QUEUES:
        r.problem(node, f"kueue.localQueues: at most {MAX_LOCAL_QUEUES}, got {len(items)}")
        return ()
    out: list[LocalQueueSpec] = []
    namespaces: set[str] = set()
    for item in items:
        m = r.fields(item, "a LocalQueue", _LQ, required=("name", "namespace", "clusterQueue"))
        if m is None:
            continue
        name = r.get(m, "name", r.string, "")
        ns = r.get(m, "namespace", r.string, "")
        cq = r.get(m, "clusterQueue", r.string, "")
        share = r.get(m, "share", lambda n, w: r.number(n, w, 0.0, MAX_WEIGHT), 1.0)
        if ns in namespaces:
            r.problem(m["namespace"], f"namespace {ns!r} has a LocalQueue already (one each)")
        namespaces.add(ns)
        if cq and cq not in queues:
            r.problem(
                m["clusterQueue"],
                f"LocalQueue {name!r}: no ClusterQueue {cq!r}{did_you_mean(cq, queues)}",
            )
        out.append(LocalQueueSpec(name, ns, cq, share))
    if out and sum(lq.share for lq in out) <= 0:
        r.problem(node, "kueue.localQueues: at least one share must be above 0")
    return tuple(out)


__all__ = [
    "STRATEGIES",
    "ClusterQueueSpec",
    "FlavorQuota",
    "KueueSpec",
    "LocalQueueSpec",
    "PodsReadySpec",
    "read_kueue",
]
