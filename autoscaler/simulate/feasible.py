"""Whether every job a scenario draws can ever run: a scenario where some cannot is
refused before anything is built, with the reason, where it is written.

Why: a job that no pool can ever hold does not fail in the simulator, it waits.
Its pods stay pending to the end, the rules run and the baseline run both report
a queue, and the figures look like a verdict on the rules when they are a typo in
the scenario. The reader already refuses a job size that does not fit a node
(``scenario.py``); this module adds what only the pools and the workload together
say, each as ``file:line:col`` like every other problem:

- **a pool with ``max: 0``** (it never has a node) that jobs are drawn for, when no
  other pool they may run on can have one;
- **a pool that can only start from zero while its nodes' shape cannot be
  known**: ``initial: 0`` and ``capacityAnnotations: false``. The controller
  matches a pending pod with a pool at 0 nodes only through the capacity
  annotations (``autoscaler/pools/capacity.py``), so nothing ever scales it up,
  as on a real cluster whose MachineDeployment nobody annotated;
- **a gang bigger than its pool can grow**: ``size / devicesPerNode`` whole nodes
  above the pool's ``max``;
- **no pool that jobs are drawn for**: every weight 0 (by default the weights are
  the pools' initial devices, so a fleet whose every pool starts at 0 needs
  ``workload.pools``).

Which pools a job is drawn for, and which it may run on, follow
``autoscaler/simulate/jobs.py`` (``_submit`` and ``eligible``): a job of ``size``
is drawn among the pools of positive weight that can hold it (a node of at least
``size`` devices, or, with ``gangKind``, a multiple of whole nodes); a gang runs
on its own pool; any other job on its own pool, or with ``eligiblePools`` on the
listed or the vendor's pools whose nodes are big enough. A pool can have a node
when its ``max`` is at least one (a gang: its node count) and it starts with one
or carries the capacity annotations. A pool that starts with nodes and may be
scaled to zero without annotations is not refused: it runs, and then waits, as
the same MachineDeployment would on a cluster.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Protocol

from yaml.nodes import MappingNode, Node, ScalarNode, SequenceNode

from autoscaler.simulate import poolshape
from autoscaler.simulate.scenario_workload import ScenarioReader, WorkloadSpec


class PoolSpec(poolshape.PoolSpec, Protocol):
    """What is read here of a pool (``scenario.PoolSpec``): its shape, and the
    sizes it may start at and grow to."""

    @property
    def initial(self) -> int: ...
    @property
    def max(self) -> int: ...


def _keys(node: Node | None) -> dict[str, Node]:
    """A mapping node's values by their key (a node that is not a mapping has
    none: its problem was reported where it was read)."""
    if not isinstance(node, MappingNode):
        return {}
    return {str(k.value): v for k, v in node.value if isinstance(k, ScalarNode)}


def _key_nodes(node: Node | None) -> dict[str, Node]:
    """A mapping node's key nodes by their text (``sizes: {8: 1}``: the ``8``)."""
    if not isinstance(node, MappingNode):
        return {}
    return {str(k.value): k for k, _ in node.value if isinstance(k, ScalarNode)}


def weights(pools: Sequence[PoolSpec], workload: WorkloadSpec) -> dict[str, float]:
    """What each pool weighs in the draw of a job's pool (``jobs.py`` ``_submit``)."""
    if workload.pools:
        return dict(workload.pools)
    return {p.name: float(p.initial * p.devices_per_node) for p in pools}


def _holds(pool: PoolSpec, size: int, gangs: bool) -> bool:
    per = pool.devices_per_node
    return per >= size or (gangs and size % per == 0)


def runs_on(
    pool: PoolSpec, size: int, pools: Sequence[PoolSpec], workload: WorkloadSpec
) -> tuple[PoolSpec, ...]:
    """The pools a job of ``size`` drawn for ``pool`` may run on (``jobs.py``)."""
    per = pool.devices_per_node
    if workload.gang_kind is not None and size >= per and size % per == 0:
        return (pool,)
    if workload.eligible == "vendor":
        names = {p.name for p in pools if p.vendor == pool.vendor}
    elif workload.eligible == "list" and pool.name in workload.eligible_pools:
        names = set(workload.eligible_pools)
    else:
        names = {pool.name}
    return tuple(p for p in pools if p.name in names and p.devices_per_node >= size)


def why_never(pool: PoolSpec, nodes: int) -> str | None:
    """Why ``pool`` can never have ``nodes`` nodes at once, or None when it can."""
    if pool.max == 0:
        return f"pool {pool.name!r} has max: 0, so it never has a node"
    if nodes > pool.max:
        return (
            f"a gang of {nodes} whole nodes does not fit pool {pool.name!r}, which has at "
            f"most {pool.max} (max: {pool.max}, {pool.devices_per_node} devices per node)"
        )
    if pool.initial == 0 and not pool.capacity_annotations:
        return (
            f"pool {pool.name!r} starts with no node (initial: 0) and its MachineDeployment "
            "carries no capacity annotations (capacityAnnotations: false), so the "
            "controller cannot know what a node of it would offer and never scales it up"
        )
    return None


def _fix(pool: PoolSpec, nodes: int, size: int) -> str:
    if pool.max == 0 or nodes > pool.max:
        return (
            f"raise the max of pool {pool.name!r} to {max(nodes, 1)} or more, or draw no "
            f"jobs of {size} devices for it"
        )
    return f"give pool {pool.name!r} capacityAnnotations: true, or initial: 1 or more"


def _where(pool: PoolSpec, nodes: int, item: Mapping[str, Node], fallback: Node) -> Node:
    """The value a problem of ``pool`` is reported at: its ``max``, or what makes it
    start from zero without a shape."""
    if pool.max == 0 or nodes > pool.max:
        return item.get("max") or fallback
    return item.get("capacityAnnotations") or item.get("initial") or fallback


def check_feasible(
    r: ScenarioReader,
    spec: Mapping[str, Node],
    pools: Sequence[PoolSpec],
    workload: WorkloadSpec,
) -> None:
    """Reports, in ``r``, every job size drawn for a pool that nothing could run
    (module docstring): one problem per reason, at the value to change."""
    fallback = spec.get("pools") or spec.get("workload")
    if fallback is None:
        return
    items: dict[str, dict[str, Node]] = {}
    for item in fallback.value if isinstance(fallback, SequenceNode) else ():
        keys = _keys(item)
        if "name" in keys:
            items[str(keys["name"].value)] = keys
    work = _keys(spec.get("workload"))
    drawn = weights(pools, workload)
    if sum(drawn.values()) <= 0:
        how = (
            "the weights of workload.pools are all 0"
            if workload.pools
            else "jobs are drawn for each pool in proportion to its initial devices, "
            "and every pool starts with none"
        )
        r.problem(
            work.get("pools") or spec.get("workload") or fallback,
            f"no pool gets any job: {how}; give the pools jobs are drawn for a weight "
            "above 0 in workload.pools (e.g. pools: {h100: 1})",
        )
        return
    size_keys = _key_nodes(work.get("sizes"))
    gangs = workload.gang_kind is not None
    said: set[str] = set()
    for size, weight in workload.sizes:
        if weight <= 0:
            continue
        for pool in pools:
            if drawn.get(pool.name, 0.0) <= 0 or not _holds(pool, size, gangs):
                continue
            targets = runs_on(pool, size, pools, workload)
            need = {p.name: -(-size // p.devices_per_node) for p in targets}
            reasons = [(p, why_never(p, need[p.name])) for p in targets]
            if any(why is None for _, why in reasons):
                continue  # some pool it may run on can hold it
            nor = "" if len(targets) == 1 else " (nor can any other pool it may run on)"
            for p, why in reasons:
                if why is None or why in said:
                    continue
                said.add(why)
                n = need[p.name]
                at = _where(p, n, items.get(p.name, {}), fallback)
                if 0 < p.max < n:  # a gang too big: said at its size
                    at = size_keys.get(str(size), at)
                r.problem(
                    at,
                    f"jobs of {size} devices drawn for pool {pool.name!r} can never run"
                    f"{nor}: {why}; {_fix(p, n, size)}",
                )


__all__ = ["check_feasible", "runs_on", "weights", "why_never"]
