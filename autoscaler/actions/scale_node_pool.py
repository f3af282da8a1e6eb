"""``scale_node_pool``: grow or shrink a node pool by ``step`` nodes, within the
pool's own minimum and maximum.

The direction is part of the rule, not inferred: "pending device requests" and
"devices idle for half an hour" are different conditions with different ``for``
and cooldown, so growing and shrinking are two rules, each saying which way it
goes. The pool's bounds come from its provider (Cluster API annotations) when the
action runs, and a step that would cross them is cut short there. There is
nothing to undo: the opposite rule is the undo.

Targets: ``pool``.

Parameters:

========================  ==========================================  =========
``direction``             ``up`` or ``down``                          required
``step``                  nodes per action (>= 1)                     ``1``
``spareFaultRate``        node faults per node-hour to keep spares    ``0``
                          for (>= 0; 0 keeps no spare buffer)
``spareFaultRateQuery``   PromQL for the observed faults per          none
                          node-hour of the pool (``$pool`` is its
                          name); replaces ``spareFaultRate`` when it
                          answers
``provisioningTime``      how long a new node takes to be Ready       ``10m``
                          (duration)
``restartOverhead``       how long a gang takes to restart on a       ``10m``
                          spare (duration)
``spareQuantile``         the probability that every fault of one     ``0.999``
                          window finds a spare (0.5-0.999999)
``maxSpares``             the most spares kept (>= 0)                 ``8``
========================  ==========================================  =========

Spares (``autoscaler/actions/ops/spares.py``, formula and worked example in
docs/actions.md): with a fault rate above 0, every decision sizes the pool's spare
buffer as the smallest s with P(Poisson(μ) ≤ s) ≥ ``spareQuantile``, where
μ = λ · nodes · (``provisioningTime`` + ``restartOverhead``) in hours, writes it
on the MachineDeployment as ``accel-fleet.io/spare-nodes``, and keeps it: a
scale-up also adds the spares that are missing (idle nodes: Ready with their
devices allocatable, schedulable, no device-using pod), and a scale-down never
removes an idle node that the buffer needs.

Execution (``execute``), through ``ctx.pools`` (a ``NodePoolProvider``):

- **Up** counts capacity that is on its way. A node that was asked for and has not
  registered yet (``Pool.provisioning``: a Machine without a nodeRef, or a replica
  no Machine backs yet), or has registered but whose devices are not allocatable
  yet (Ready before its device plugin or DRA driver advertised them, for at most
  15 minutes from its creation: ``autoscaler/pools/capacity.py``), already answers
  the demand that asked for it, and the pending pods that triggered the rule keep
  pending until it is usable. So a decision adds ``step`` nodes *minus those
  already provisioning*:
  ``replicas := min(max, replicas + max(0, step - provisioning))``. With ``step: 1``
  and one node still booting, the decision adds nothing and says so; a slow node
  boot never turns into a second, third, fourth node for the same pods. At the
  maximum it is refused.
- **Down** removes up to ``step`` nodes, one at a time, never going below the
  minimum. For each: pick the pool's least-loaded node (fewest pods that hold
  devices, ties by name) whose device pods can all run on the other nodes
  (``ops/fit.py``: movable, and room for them; none such, and nothing is
  removed), cordon and drain it (``drain_node``, which records
  ownership in ``accel-fleet.io/remediation`` and evicts through the Eviction API,
  for at most the drain action's default ``drainTimeout``), and only when the drain
  is done (nothing it moves is left on the node), mark its Machine for deletion and
  *then* lower replicas by one. In that
  order the provider can never remove a node other than the drained one. A drain
  that is not done (a PodDisruptionBudget holding a pod) stops the scale-down with
  ``partial``: replicas stay, the node stays cordoned, and the next decision picks
  the same, now emptiest, node again and resumes its drain (``drain_node`` keeps
  the drain's start, and so its deadline, in the node annotation). A crash
  anywhere in the sequence resumes the same way; after replicas dropped the
  provider no longer counts the marked node (``autoscaler/pools/clusterapi.py``), so nothing is
  removed twice.
- In dry-run the drain makes one pass (its evictions are recorded, not carried
  out, so waiting for the node to empty would wait for nothing), and the
  Machine mark and the replica change are recorded even when a
  PodDisruptionBudget refused an eviction in that pass, to show the whole
  sequence.
- Every decision writes an Event on the pool's object (the MachineDeployment):
  ``ScaledUp``, ``ScaledDown`` (one per node removed) or ``ScaleRefused`` (with
  the reason: not autoscalable, at a bound, capacity already provisioning, a drain
  that did not finish, an API error).
"""

from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal, Protocol, cast, runtime_checkable

from accel_common.dra import node_offers
from accel_common.names import SPARE_NODES_ANNOTATION
from autoscaler.actions.base import (
    ActionSpec,
    ParamProblem,
    ParamReader,
    from_params,
    param,
    param_keys,
    to_params,
)
from autoscaler.actions.context import ActionContext, Outcome, Status
from autoscaler.actions.ops import fit, spares
from autoscaler.actions.ops.drain import DEFAULT_DRAIN_TIMEOUT, drain_node
from autoscaler.actions.ops.ownership import event
from autoscaler.actions.ops.pods import is_finished, uses_devices
from autoscaler.actions.ops.unknown import answering_unknown
from autoscaler.decision import Decision
from autoscaler.kube.errors import KubeError, NotFound
from autoscaler.kube.protocol import MACHINE_DEPLOYMENTS, Obj
from autoscaler.pools.base import NodePoolProvider, Pool
from autoscaler.pools.capacity import DraView, readiness
from autoscaler.promql.guard import parse

log = logging.getLogger("accel_autoscaler.actions")

NAME = "scale_node_pool"
TARGETS = ("pool",)
DIRECTIONS = ("up", "down")

Direction = Literal["up", "down"]


@dataclass(frozen=True)
class ScaleNodePoolParams:
    direction: Direction = field(metadata={"key": "direction"})
    step: int = param("step", 1)
    spare_fault_rate: float = param("spareFaultRate", 0.0)
    spare_fault_rate_query: str | None = param("spareFaultRateQuery", None)
    provisioning_time: float = param("provisioningTime", 600.0)
    restart_overhead: float = param("restartOverhead", 600.0)
    spare_quantile: float = param("spareQuantile", 0.999)
    max_spares: int = param("maxSpares", 8)


def validate(raw: Mapping[str, Any]) -> tuple[dict[str, Any], list[ParamProblem]]:
    r = ParamReader(NAME, raw, param_keys(ScaleNodePoolParams))
    direction = r.choice("direction", DIRECTIONS, None)
    d = ScaleNodePoolParams("up")
    query = r.string("spareFaultRateQuery", d.spare_fault_rate_query) or None
    if query:
        try:
            parse(query.replace(spares.POOL_PLACEHOLDER, '"pool"'))
        except ValueError as e:
            r.problem("spareFaultRateQuery", f"not a PromQL expression: {e}")
            query = None
    params = ScaleNodePoolParams(
        direction=cast(Direction, direction or "up"),
        step=r.integer("step", 1, minimum=1),
        spare_fault_rate=r.number("spareFaultRate", d.spare_fault_rate),
        spare_fault_rate_query=query,
        provisioning_time=r.duration("provisioningTime", d.provisioning_time),
        restart_overhead=r.duration("restartOverhead", d.restart_overhead),
        spare_quantile=r.ratio("spareQuantile", d.spare_quantile, low=0.5, high=0.999999),
        max_spares=r.integer("maxSpares", d.max_spares, minimum=0),
    )
    return to_params(params), r.problems


@runtime_checkable
class DescribedPools(Protocol):
    """What a provider may offer beyond ``NodePoolProvider`` so that refusals and
    Events name its real objects (``ClusterAPIProvider`` does)."""

    def refusal(self, pool: str) -> str | None:
        """Why the last ``pools()`` left this pool out, or None."""
        ...

    def event_object(self, pool: str) -> Obj:
        """The pool's object (apiVersion, kind, metadata) for its Events."""
        ...


class _Report:
    """Writes the decision's Events on the pool's object."""

    def __init__(self, ctx: ActionContext, provider: NodePoolProvider, pool: str) -> None:
        self.ctx = ctx
        self.obj = provider.event_object(pool) if isinstance(provider, DescribedPools) else None
        self.pool = pool

    async def __call__(self, reason: str, message: str, *, warning: bool = False) -> None:
        if self.obj is None:
            log.info("pool %s: %s: %s (no object to record it on)", self.pool, reason, message)
            return
        await event(self.ctx, self.obj, reason, message, warning=warning, action=NAME)


def _why(decision: Decision) -> str:
    return f"rule {decision.rule}" + (f": {decision.reason}" if decision.reason else "")


async def execute(ctx: ActionContext, decision: Decision) -> Outcome:
    """Grow or shrink the decision's pool (see the module docstring)."""
    params = from_params(ScaleNodePoolParams, decision.params)
    name = decision.target.get("pool", "")
    provider = ctx.pools
    if provider is None:
        return Outcome(
            "failed",
            f"scale_node_pool: no node-pool provider is configured, so pool {name!r} cannot "
            "be scaled (configure the Cluster API provider with the MachineDeployments' "
            "namespace)",
        )
    if not name:
        return Outcome("failed", f"scale_node_pool: target {dict(decision.target)} names no pool")
    report = _Report(ctx, provider, name)
    try:
        pool = next((p for p in await provider.pools() if p.name == name), None)
        if pool is None:
            why = provider.refusal(name) if isinstance(provider, DescribedPools) else None
            message = why or f"no pool named {name!r} (provider {provider.name})"
            await report("ScaleRefused", f"{message} ({_why(decision)})", warning=True)
            return Outcome("skipped", message)
        buffer = await _buffer(ctx, provider, pool, params)
        if params.direction == "up":
            return await _scale_up(ctx, provider, pool, params.step, decision, report, buffer)
        return await _scale_down(ctx, provider, pool, params.step, decision, report, buffer)
    except (KubeError, ValueError, LookupError) as e:
        message = f"pool {name}: {e}"
        await report("ScaleRefused", f"{message} ({_why(decision)})", warning=True)
        return Outcome("failed", message)


@dataclass(frozen=True)
class _Buffer:
    """The pool's spare buffer now: its size and the idle nodes that hold it."""

    size: spares.SpareSize | None
    idle: tuple[str, ...] = ()

    @property
    def wanted(self) -> int:
        return self.size.spares if self.size is not None else 0

    @property
    def missing(self) -> int:
        return max(0, self.wanted - len(self.idle))

    def details(self) -> dict[str, Any]:
        if self.size is None:
            return {}
        return {"spares": self.wanted, "idle": len(self.idle), "spareRule": self.size.explain()}


async def _buffer(
    ctx: ActionContext, provider: NodePoolProvider, pool: Pool, params: ScaleNodePoolParams
) -> _Buffer:
    """Size the pool's spare buffer, count its idle nodes, and write the size on
    the pool's MachineDeployment. No fault rate: no buffer, nothing read."""
    if params.spare_fault_rate <= 0 and not params.spare_fault_rate_query:
        return _Buffer(None)
    rate, source = await spares.observed_rate(
        ctx, params.spare_fault_rate_query or "", pool.name, params.spare_fault_rate
    )
    sized = spares.size(
        rate,
        max(pool.replicas, len(pool.nodes)),
        provisioning_time=params.provisioning_time,
        restart_overhead=params.restart_overhead,
        quantile=params.spare_quantile,
        max_spares=params.max_spares,
        source=source,
    )
    idle = await _idle_nodes(ctx, pool)
    obj = provider.event_object(pool.name) if isinstance(provider, DescribedPools) else None
    if obj is not None:
        meta = obj.get("metadata") or {}
        group, _, version = str(obj.get("apiVersion", "")).partition("/")
        patch = {"metadata": {"annotations": {SPARE_NODES_ANNOTATION: str(sized.spares)}}}
        try:
            await ctx.kube.patch_custom(
                group, version, meta.get("namespace", ""), MACHINE_DEPLOYMENTS, pool.name, patch
            )
        except KubeError as e:
            log.warning("pool %s: could not record the spare buffer: %s", pool.name, e)
    return _Buffer(sized, tuple(idle))


async def _idle_nodes(ctx: ActionContext, pool: Pool) -> list[str]:
    """The spares among the pool's nodes: Ready with their devices allocatable (a
    node still waiting for its devices is no spare yet: ``autoscaler/pools/
    capacity.py``), schedulable, untainted, no device-using pod. Two list calls
    whatever the pool's size (the controller's watch cache answers them), not two
    calls per node."""
    busy = {
        str((p.get("spec") or {}).get("nodeName") or "")
        for p in await ctx.kube.list_pods()
        if uses_devices(p) and not is_finished(p)
    }
    listed = await ctx.kube.list_nodes()
    by_name = {str((n.get("metadata") or {}).get("name") or ""): n for n in listed}
    usable = set(readiness(pool, by_name, ctx.clock()).ready)
    idle: list[str] = []
    for name in pool.nodes:
        spec = (by_name.get(name) or {}).get("spec") or {}
        if name not in usable or name in busy or spec.get("unschedulable"):
            continue
        if any(t.get("effect") in ("NoSchedule", "NoExecute") for t in spec.get("taints") or []):
            continue
        idle.append(name)
    return sorted(idle)


async def _warming(ctx: ActionContext, pool: Pool) -> tuple[str, ...]:
    """The pool's registered nodes that wait for their devices and still count as
    capacity on its way (``autoscaler/pools/capacity.py``): one list of nodes and
    one of ResourceSlices, so that a DRA node is judged by its slices as the pool
    series judge it."""
    if not pool.nodes:
        return ()
    listed = await ctx.kube.list_nodes()
    by_name = {str((n.get("metadata") or {}).get("name", "")): n for n in listed}
    return readiness(pool, by_name, ctx.clock(), dra=await _slices(ctx)).warming


def _no_claims(pod: Obj) -> dict[str, int]:
    return {}


async def _slices(ctx: ActionContext) -> DraView | None:
    """What the nodes' ResourceSlices offer; a cluster that does not serve DRA offers
    nothing through it, and one whose slices the controller may not read leaves DRA
    pools unjudged (None), as the pool series do."""
    try:
        slices = await ctx.kube.list_resource_slices()
    except NotFound:
        return DraView({}, _no_claims)
    except KubeError as e:
        log.info("cannot list ResourceSlices (%s): DRA nodes are not judged by them", e)
        return None
    return DraView(node_offers(slices), _no_claims)


async def _scale_up(
    ctx: ActionContext,
    provider: NodePoolProvider,
    pool: Pool,
    step: int,
    decision: Decision,
    report: _Report,
    buffer: _Buffer,
) -> Outcome:
    warming = await _warming(ctx, pool)
    coming = pool.provisioning + len(warming)
    details = {
        "pool": pool.name,
        "replicas": pool.replicas,
        "provisioning": pool.provisioning,
        "warming": list(warming),
        **buffer.details(),
    }
    if pool.replicas >= pool.max_size:
        message = f"pool {pool.name} is at its maximum ({pool.replicas} of {pool.max_size})"
        await report("ScaleRefused", f"{message} ({_why(decision)})")
        return Outcome("skipped", message, details)
    # The demand's step, plus the spares the buffer lacks; both are answered by
    # what is already provisioning, and by registered nodes still waiting for their
    # devices (autoscaler/pools/capacity.py).
    add = max(0, step + buffer.missing - coming)
    if add == 0:
        message = (
            f"pool {pool.name}: {coming} node(s) already provisioning cover "
            f"step {step}"
            + (f" and {buffer.missing} missing spare(s)" if buffer.missing else "")
            + (f" ({', '.join(warming)} registered, waiting for their devices)" if warming else "")
            + "; not adding more until they register"
        )
        await report("ScaleRefused", f"{message} ({_why(decision)})")
        return Outcome("skipped", message, details)
    target = min(pool.max_size, pool.replicas + add)
    await provider.set_replicas(pool.name, target)
    message = (
        f"scaled pool {pool.name} up from {pool.replicas} to {target} replicas"
        + (f" ({coming} already provisioning)" if coming else "")
        + (f", capped at its maximum {pool.max_size}" if target < pool.replicas + add else "")
        + (
            f", {buffer.missing} of them spares ({buffer.size.explain()})"
            if buffer.missing and buffer.size
            else ""
        )
    )
    await report("ScaledUp", f"{message} ({_why(decision)})")
    return Outcome("done", message, {**details, "to": target})


async def _scale_down(
    ctx: ActionContext,
    provider: NodePoolProvider,
    pool: Pool,
    step: int,
    decision: Decision,
    report: _Report,
    buffer: _Buffer,
) -> Outcome:
    replicas = pool.replicas
    removed: list[str] = []
    details: dict[str, Any] = {
        "pool": pool.name,
        "replicas": pool.replicas,
        "removed": removed,
        **buffer.details(),
    }
    kept = ""
    for _ in range(step):
        if replicas <= pool.min_size:
            break
        candidates = [n for n in pool.nodes if n not in removed]
        if not candidates:
            break
        if not ctx.leading():
            message = f"pool {pool.name}: lost the lease; {_done(removed)}"
            return Outcome("partial", message, details)
        picked = await _next_node(ctx, candidates, removed, decision.rule, buffer)
        if isinstance(picked, fit.Unknown):
            message = f"pool {pool.name}: {picked.reason}; no node removed; {_done(removed)}"
            return Outcome("partial" if removed else "unknown", message, details)
        if picked.node is None:
            kept = picked.why
            break
        node = picked.node
        why = f"scale-down of pool {pool.name} ({_why(decision)})"
        drained = await drain_node(
            ctx,
            node,
            rule=decision.rule,
            timeout=DEFAULT_DRAIN_TIMEOUT,
            reason=why,
        )
        # A drain is "done" only when nothing it would move is left on the node.
        if drained.status != "done" and not (ctx.dry_run and drained.status == "partial"):
            message = (
                f"pool {pool.name}: drain of node {node} not finished ({drained.message}); "
                f"replicas stay at {replicas}; {_done(removed)}"
            )
            await report("ScaleRefused", f"{message} ({_why(decision)})", warning=True)
            status: Status = "partial" if removed or drained.status == "partial" else drained.status
            return Outcome(status, message, {**details, "drain": drained.as_json()})
        try:
            await provider.mark_for_deletion(pool.name, node)
            await provider.set_replicas(pool.name, replicas - 1)
        except (KubeError, ValueError, LookupError) as e:
            message = (
                f"pool {pool.name}: node {node} is drained and cordoned, but removing it "
                f"failed: {e}; replicas stay at {replicas}; {_done(removed)}"
            )
            await report("ScaleRefused", f"{message} ({_why(decision)})", warning=True)
            return Outcome("failed", message, details)
        replicas -= 1
        removed.append(node)
        await report(
            "ScaledDown",
            f"drained node {node}, marked its Machine for deletion and scaled pool "
            f"{pool.name} down to {replicas} replicas ({_why(decision)})",
        )
    if not removed:
        return await _none_removed(pool, replicas, kept, decision, report, details)
    return Outcome(
        "done",
        f"scaled pool {pool.name} down from {pool.replicas} to {replicas} replicas; "
        f"{_done(removed)}",
        {**details, "to": replicas},
    )


async def _next_node(
    ctx: ActionContext, candidates: list[str], removed: list[str], rule: str, buffer: _Buffer
) -> fit.Pick | fit.Unknown:
    """The node a scale-down removes next (``ops/fit.py``: its device pods can run
    elsewhere), or why none: none fits, the one that does is a spare the buffer
    keeps, or the nodes could not be read (``Unknown``)."""
    picked = await fit.pick(ctx, candidates, rule)
    if isinstance(picked, fit.Unknown) or picked.node is None:
        return picked
    idle_left = [n for n in buffer.idle if n not in removed]
    if picked.node in idle_left and len(idle_left) <= buffer.wanted:
        assert buffer.size is not None
        return fit.Pick(
            None,
            f"node {picked.node} is one of the {buffer.wanted} spare(s) the buffer keeps "
            f"({buffer.size.explain()})",
        )
    return picked


async def _none_removed(
    pool: Pool,
    replicas: int,
    kept: str,
    decision: Decision,
    report: _Report,
    details: dict[str, Any],
) -> Outcome:
    """A scale-down that removed no node: why (the minimum, a spare the buffer
    keeps, or no registered node), said as an Event too."""
    message = f"pool {pool.name} is at its minimum ({pool.replicas}, minimum {pool.min_size})"
    if kept:
        message = f"pool {pool.name}: {kept}"
    elif replicas > pool.min_size:
        message = f"pool {pool.name} has no registered node to remove"
    await report("ScaleRefused", f"{message} ({_why(decision)})")
    return Outcome("skipped", message, details)


def _done(removed: Sequence[str]) -> str:
    return f"removed {', '.join(removed)}" if removed else "no node removed"


SPEC = answering_unknown(
    ActionSpec(
        NAME,
        TARGETS,
        reversible=False,
        params_type=ScaleNodePoolParams,
        validate=validate,
        execute=execute,
    )
)
