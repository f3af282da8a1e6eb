"""The controller: the evaluation loop of ``accel-autoscaler run``.

Once per ``evaluationInterval`` the controller picks up changed rule files and
runs one evaluation cycle (``engine/cycle.py``, the same function the simulator
and the rule unit tests run): the source is refreshed, the nodes' remediation
entries and the cluster's state (job ages and timeouts, node pools) are read into
series, every rule (and its ``recover`` expression) is queried, and the engine's
pure ``evaluate`` decides. Decisions are logged, counted for ``/metrics`` and
handed to the executor (``autoscaler/executor.py``), which carries them out
through the ``Kube`` wrapper without holding up the next cycle.

Only the replica that holds the Lease evaluates and acts; the others wait. With no
Kubernetes API configured (``--dry-run`` only) decisions are recorded, not acted
on, and the log says so. Flags and wiring live in ``commands/run.py``; the HTTP
face in ``server.py``.
"""

from __future__ import annotations

import asyncio
import logging
import os
import time
from collections import Counter
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any

from accel_common.names import LEADER_LABEL
from autoscaler.actions.ownership import entries, parse_iso
from autoscaler.clusterstate import ingest
from autoscaler.decision import Decision
from autoscaler.engine.cycle import NODES_QUERY, run_cycle, source_cluster
from autoscaler.engine.state import EngineState
from autoscaler.executor import Executor
from autoscaler.ruleset.model import RuleSet
from autoscaler.ruleset.watch import RuleWatcher
from autoscaler.sources.alertmanager import AlertReceiver
from autoscaler.sources.base import Source

log = logging.getLogger("accel_autoscaler")

DEFAULT_PORT = 9836


@dataclass
class CycleStats:
    cycles: int = 0
    last_duration: float = 0.0
    last_timestamp: float = 0.0
    decisions: Counter[tuple[str, str, str, bool]] = field(default_factory=Counter)
    unknown: Counter[str] = field(default_factory=Counter)
    skipped_source_down: int = 0
    # Cycles skipped because another replica holds the Lease.
    standby: int = 0
    cluster_state_errors: int = 0


# The cluster-state series as (metric, labels, value) rows (autoscaler/clusterstate.py).
ClusterRows = list[tuple[Any, dict[str, str], float]]
ClusterState = Callable[[float], Awaitable[ClusterRows]]


def always_leading() -> bool:
    return True


class Controller:
    def __init__(
        self,
        watcher: RuleWatcher,
        source: Source,
        alerts: AlertReceiver,
        *,
        dry_run: bool = False,
        clock: Callable[[], float] = time.time,
        executor: Executor | None = None,
        leading: Callable[[], bool] = always_leading,
        cluster_state: ClusterState | None = None,
    ) -> None:
        self.watcher = watcher
        self.source = source
        self.alerts = alerts
        self.dry_run = dry_run
        self.clock = clock
        self.executor = executor
        self.leading = leading
        self.cluster_state = cluster_state
        self.cluster_rows: ClusterRows = []
        self.cluster_nodes: dict[str, float] = {}
        # (node, rule, action, phase) of this controller's remediation entries.
        self.remediations: list[tuple[str, str, str, str]] = []
        self.kube: Any = executor.ctx.kube if executor is not None else None
        self.state = EngineState()
        self.stats = CycleStats()
        self.source_up = False
        self.lock = asyncio.Lock()

    @property
    def ruleset(self) -> RuleSet:
        return self.watcher.current

    def _retain(self) -> None:
        retain = getattr(self.source, "retain", None)
        if retain is not None:
            exprs = [NODES_QUERY]
            for r in self.ruleset.rules:
                exprs += [e for e in (r.expr, r.recover.expr if r.recover else None) if e]
            retain(exprs)

    async def _read_nodes(self) -> None:
        """The remediation entries and registration times of the nodes, for
        ``/metrics`` and the breaker's scale-up grace."""
        if self.kube is None or self.executor is None:
            return
        try:
            nodes = await self.kube.list_nodes()
        except Exception as e:  # the API server may be down; the cycle goes on
            self.stats.cluster_state_errors += 1
            log.warning("cannot list nodes: %s", e)
            return
        controller = self.executor.ctx.controller
        remediations: list[tuple[str, str, str, str]] = []
        registered: dict[str, float] = {}
        for n in nodes:
            meta = n.get("metadata") or {}
            name = str(meta.get("name", ""))
            for rule, entry in entries(n).items():
                if entry.controller == controller:
                    remediations.append((name, rule, entry.action, entry.phase))
            try:
                registered[name] = parse_iso(str(meta.get("creationTimestamp", "")))
            except ValueError:
                continue
        self.remediations = remediations
        self.cluster_nodes = registered

    async def _read_cluster(self, now: float) -> None:
        """Cluster state into series, before the rules are queried. A failure keeps
        the last rows out of the evaluator (their series go stale, so rules on
        them read unknown) and is counted, never fatal."""
        if self.cluster_state is None:
            return
        try:
            self.cluster_rows = await self.cluster_state(now)
        except Exception as e:  # the API server may be down; the cycle goes on
            self.stats.cluster_state_errors += 1
            self.cluster_rows = []
            log.warning("cannot read the cluster state: %s", e)
            return
        store = getattr(self.source, "store", None)
        if store is not None:
            ingest(store, self.cluster_rows, now)

    async def _prepare(self, now: float) -> None:
        await self._read_nodes()
        await self._read_cluster(now)

    def _submit(self, d: Decision) -> None:
        self.stats.decisions[(d.rule, d.action, d.kind, d.dry_run)] += 1
        log.info(
            "decision %s: rule=%s action=%s target=%s value=%g%s%s",
            d.kind,
            d.rule,
            d.action,
            dict(d.target),
            d.sample_value,
            " dry-run" if d.dry_run else "",
            "" if self.executor else " (recorded only: no Kubernetes API configured)",
        )
        if self.executor is not None:
            self.executor.submit(d)

    async def cycle(self) -> list[Decision]:
        """One evaluation (``engine/cycle.py``), if this replica leads. The lock keeps
        an API call (breaker reset) and the loop from interleaving on the engine
        state."""
        async with self.lock:
            if not self.leading():
                if self.stats.standby == 0:
                    log.info("standing by: another replica holds the leader lease")
                self.stats.standby += 1
                return []
            start = time.perf_counter()
            if self.watcher.check() or self.stats.cycles == 0:
                self._retain()
            now = self.clock()
            result = await run_cycle(
                self.ruleset,
                self.source,
                self.alerts,
                self.state,
                now,
                cluster=source_cluster(self.source, lambda: self.cluster_nodes),
                prepare=self._prepare,
                submit=self._submit,
                dry_run=self.dry_run,
            )
            self.source_up = result.source_up
            if not result.source_up:
                self.stats.skipped_source_down += 1
            for name in result.unknown:
                self.stats.unknown[name] += 1
            self.stats.cycles += 1
            self.stats.last_duration = time.perf_counter() - start
            self.stats.last_timestamp = now
            return result.decisions

    async def run_forever(self) -> None:
        loop = asyncio.get_running_loop()
        while True:
            started = loop.time()
            try:
                await self.cycle()
            except asyncio.CancelledError:
                raise
            except Exception:  # the loop must outlive any one bad cycle
                log.exception("evaluation cycle failed")
            interval = self.ruleset.evaluation_interval
            await asyncio.sleep(max(0.0, interval - (loop.time() - started)))


class LeaderLabel:
    """Puts ``accel-fleet.io/leader: "true"`` on this replica's pod while it leads
    (``$POD_NAMESPACE``/``$POD_NAME`` from the downward API); without them, outside a
    pod, it does nothing. A failure is logged: the standby also answers the webhook
    with 503, so Alertmanager retries until it reaches the leader."""

    def __init__(self, kube: Any) -> None:
        self.kube = kube
        self.namespace = os.environ.get("POD_NAMESPACE", "")
        self.name = os.environ.get("POD_NAME", "")

    async def set(self, leading: bool) -> None:
        if not (self.namespace and self.name):
            return
        value = "true" if leading else None
        try:
            await self.kube.patch_pod(
                self.namespace, self.name, {"metadata": {"labels": {LEADER_LABEL: value}}}
            )
        except Exception as e:  # the API server may be down; the 503 still routes alerts
            log.warning(
                "cannot %s the leader label on my pod: %s", "set" if leading else "remove", e
            )
