"""The controller: the evaluation loop of ``accel-autoscaler run``.

Once per ``evaluationInterval`` the controller runs one evaluation cycle
(``engine/cycle.py``, the same function the simulator and the rule unit tests
run): the source is refreshed, the nodes' remediation entries and the cluster's
state (job ages and timeouts, node pools) are read into series, every rule (and
its ``recover`` expression) is queried, and the engine's pure ``evaluate``
decides. Decisions are logged, counted for ``/metrics`` and
handed to the executor (``autoscaler/executor.py``), which carries them out
through the ``Kube`` wrapper without holding up the next cycle.

Only the replica that holds the Lease evaluates and acts; the others wait. With no
Kubernetes API configured (``--dry-run`` only) decisions are recorded, not acted
on, and the log says so. Flags and wiring live in ``commands/run.py``; the HTTP
face in ``server.py``.

State that survives: at start and at every leadership gain, before its first
evaluation, the controller rebuilds the engine's memory from what it wrote on the
cluster (``restore``: the nodes' remediation entries and its state record, the
ConfigMap ``<controller-name>-state``; ``engine/restore.py`` says what comes from
where), then resumes its in-flight work. Until that has succeeded it does not
evaluate: an API server that cannot be read is no reason to act from memory. After
each cycle the leader writes the state record when it changed (``StateRecord``),
never in ``--dry-run``.

What the cycle is wired to (the engine state, the executor and its ladder hooks,
the history the source keeps, where the cluster-state series go) comes built from
``autoscaler/wiring.py``, the builder the simulator uses too; the controller is
handed it and rewires nothing.

Escalation ladders: the executor reports every action's outcome back
(``Executor.on_outcome``, wired by ``wiring.report_outcomes``: an act that did
nothing gives back its place in the hourly count, as in the simulator); a ladder
step's goes into the engine state
(``EngineState.report``), where a ``failed`` step escalates at the next cycle, and
from there into the state record, with the step and since when. After a restart
the ladders come back from the record (``engine/restore.py``), the in-flight
entries on the nodes are resumed with their step, and a step whose outcome was
never reported and that no node entry resumes is run again (each step action is
idempotent per request, its request id built from the rule, the target and the
ladder's start), so the ladder goes on at the step it was at and no earlier step
runs again.

Rules are hot-reloaded (``ruleset/watch.py``), and nothing in a rule file may put
the controller to sleep or stop it answering: the files are looked at every
second (``watch_rules``) and on SIGHUP (``request_reload``), the load runs in a
worker thread, one at a time, so ``/healthz`` and the webhook answer while a
hostile file is read, and a reload that changes the rules (or any SIGHUP) wakes
the evaluation loop at once: a new ``evaluationInterval`` takes effect now, not
when the old one is over. An interval that is not finite or outside
``MIN_INTERVAL``..``MAX_INTERVAL`` (the loader refuses those; this is the second
line) is clamped before it reaches a sleep.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import math
import os
import time
from collections import Counter
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field

from accel_common.names import LEADER_LABEL, STATE_DATA_KEY
from autoscaler.actions.ops.ownership import entries, parse_iso
from autoscaler.clusterstate import ingest
from autoscaler.decision import Decision
from autoscaler.engine.cycle import run_cycle, source_cluster
from autoscaler.engine.record import RecordError, parse_record, record_text
from autoscaler.engine.restore import restore
from autoscaler.engine.state import EngineState
from autoscaler.kube.errors import Conflict, KubeError, NotFound
from autoscaler.kube.protocol import Kube, Obj
from autoscaler.metrics import Row
from autoscaler.provisioning import Provisioner
from autoscaler.ruleset.model import RuleSet
from autoscaler.ruleset.watch import RuleWatcher
from autoscaler.sources.alertmanager import AlertReceiver
from autoscaler.sources.base import Source
from autoscaler.wiring import Wiring, retain, wire

log = logging.getLogger("accel_autoscaler")

DEFAULT_PORT = 9836

# The evaluation intervals the loop accepts, the loader's bounds: one second is
# as often as anything here is scraped, and a controller that waits more than an
# hour between looks is not remediating anything.
MIN_INTERVAL = 1.0
MAX_INTERVAL = 3600.0
# How often the rule files are looked at (a few stat calls) between cycles, so
# that an edit takes effect within a second whatever the interval.
WATCH_PERIOD = 1.0


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
    # Cycles skipped because the state could not be rebuilt from the cluster yet.
    unrestored: int = 0
    # Failed reads and writes of the state record.
    state_record_errors: int = 0
    # Cycles that failed (an exception, or the state not rebuilt from the cluster).
    failed_cycles: int = 0
    # The failures in a row so far, and the last one's reason: /healthz reads them.
    failed_in_a_row: int = 0
    last_failure: str = ""
    record_failures_in_a_row: int = 0
    last_record_failure: str = ""
    # State record entries refused when read (and dropped, never written back).
    record_refused: int = 0
    # Passes over the ProvisioningRequests that an API error ended.
    provisioning_errors: int = 0


# The cluster-state series as (metric, labels, value) rows (autoscaler/clusterstate.py).
ClusterRows = list[Row]
ClusterState = Callable[[float], Awaitable[ClusterRows]]


def always_leading() -> bool:
    return True


def no_watches() -> list[str]:
    return []


# /healthz turns red after this many failed evaluation cycles in a row, or failed
# writes of the state record in a row: one is a blip, three are a controller that
# cannot do its job (and a restart, or a person, is the answer).
MAX_FAILURES_IN_A_ROW = 3


class StateRecord:
    """The controller's state record: one ConfigMap in its namespace whose data key
    ``state.json`` holds ``engine/restore.py``'s ``record_of`` the engine state.

    Written by the leader only, and only when the text changed; with the
    ConfigMap's ``resourceVersion``, so that a replica that lost the lead without
    noticing cannot overwrite what the new leader wrote blindly: ``write`` then
    answers False, and the controller rebuilds its state from the cluster, the new
    record included, before its next write."""

    def __init__(
        self, kube: Kube, namespace: str, name: str, clock: Callable[[], float] = time.time
    ) -> None:
        self.kube = kube
        self.namespace = namespace
        self.name = name
        self.clock = clock
        self._version: str | None = None
        self._written: str | None = None
        # Entries refused by the last read (each logged).
        self.refused = 0

    async def read(self, now: float | None = None) -> EngineState | None:
        """The state the record holds; None when there is none (or it cannot be
        read as a record: logged, and overwritten by the next write). Entries
        that cannot be read are dropped, each named in a warning
        (``engine/record.py``; times are checked against ``now``, the clock's by
        default). KubeError when the API server does not answer."""
        try:
            cm = await self.kube.get_configmap(self.namespace, self.name)
        except NotFound:
            self._version = self._written = None
            return None
        meta = cm.get("metadata")
        version = meta.get("resourceVersion") if isinstance(meta, dict) else None
        self._version = str(version) if isinstance(version, (str, int)) and version else None
        data = cm.get("data")
        text = data.get(STATE_DATA_KEY) if isinstance(data, dict) else None
        self._written = None
        if not text:
            return None
        problems: list[str] = []
        try:
            state = parse_record(text, now=self.clock() if now is None else now, problems=problems)
        except RecordError as e:
            log.warning(
                "configmap %s/%s: the state record cannot be read, starting from the node "
                "entries alone: %s",
                self.namespace,
                self.name,
                e,
            )
            return None
        for problem in problems:
            log.warning("configmap %s/%s: state record %s", self.namespace, self.name, problem)
        self.refused = len(problems)
        # What was refused is left out of the next write: never written back.
        self._written = None if problems else text
        return state

    async def write(self, state: EngineState) -> bool:
        """Store ``state``'s record if it changed since the last read or write, and
        recreate it (with what memory holds) when someone deleted it. True when the
        record is current afterwards; False when someone else wrote it since (the
        caller rebuilds its state from the cluster before writing again)."""
        text = record_text(state)
        if text == self._written:
            # Unchanged here: still there, and still ours? A record deleted behind
            # our back would otherwise never be written again, and the next restart
            # would forget the hourly limits and a manually reset breaker.
            try:
                cm = await self.kube.get_configmap(self.namespace, self.name)
            except NotFound:
                log.warning(
                    "configmap %s/%s: the state record was deleted; writing it again",
                    self.namespace,
                    self.name,
                )
                self._version = self._written = None
            else:
                meta = cm.get("metadata")
                version = meta.get("resourceVersion") if isinstance(meta, dict) else None
                if str(version) == self._version:
                    return True
                self._version = self._written = None
                log.warning(
                    "configmap %s/%s changed under us; reading it again", self.namespace, self.name
                )
                return False
        body: Obj = {
            "apiVersion": "v1",
            "kind": "ConfigMap",
            "metadata": {"name": self.name, "namespace": self.namespace},
            "data": {STATE_DATA_KEY: text},
        }
        try:
            if self._version is not None:
                body["metadata"]["resourceVersion"] = self._version
                try:
                    stored = await self.kube.replace_configmap(self.namespace, self.name, body)
                except NotFound:
                    log.warning(
                        "configmap %s/%s: the state record was deleted; writing it again",
                        self.namespace,
                        self.name,
                    )
                    del body["metadata"]["resourceVersion"]
                    self._version = None
            if self._version is None:
                # Created, never replaced blindly: one that exists already is
                # someone else's write (a Conflict), read before ours.
                stored = await self.kube.create_configmap(self.namespace, body)
        except Conflict as e:
            # Someone else wrote it (a new leader): read it again before writing.
            self._version = self._written = None
            log.warning("configmap %s/%s changed under us: %s", self.namespace, self.name, e)
            return False
        self._version = str((stored.get("metadata") or {}).get("resourceVersion") or "") or None
        self._written = text
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
        wiring: Wiring | None = None,
        kube: Kube | None = None,
        leading: Callable[[], bool] = always_leading,
        cluster_state: ClusterState | None = None,
        record: StateRecord | None = None,
        lost_watches: Callable[[], list[str]] = no_watches,
        provisioner: Provisioner | None = None,
    ) -> None:
        """``wiring`` (``autoscaler/wiring.py``'s ``wire`` over the same ``source``
        and ``watcher``): the engine state and the executor; without it, a fresh
        state and nothing acts. ``kube``: where the nodes are read each cycle (an
        informer cache in ``run``); the executor's API by default."""
        if wiring is None:
            wiring = wire(source, lambda: watcher.current)
        executor = wiring.executor
        self.watcher = watcher
        self.source = source
        self.alerts = alerts
        self.dry_run = dry_run
        self.clock = clock
        self.executor = executor
        self.leading = leading
        self.cluster_state = cluster_state
        # The informers' watches that are lost (their reasons), for /healthz.
        self.lost_watches = lost_watches
        self.cluster_rows: ClusterRows = []
        self.cluster_nodes: dict[str, float] = {}
        # (node, rule, action, phase) of this controller's remediation entries.
        self.remediations: list[tuple[str, str, str, str]] = []
        if kube is None and executor is not None:
            kube = executor.ctx.kube
        self.kube = kube
        self.state = wiring.state
        # Where the cluster-state series go: the source's store (None: Prometheus
        # reads them from /metrics).
        self.store = wiring.store
        self.stats = CycleStats()
        self.source_up = False
        self.lock = asyncio.Lock()
        self.record = record
        # Whether the engine state was rebuilt from the cluster since this replica
        # started or last gained the lead; nothing to rebuild without an API.
        self.restored = executor is None
        # The rule set the source was last told to retain series for.
        self._retained: RuleSet | None = None
        # Set to run the next cycle now (new rules, SIGHUP); set by SIGHUP to
        # reload the rules whether or not their files changed.
        self._wake = asyncio.Event()
        self._reload_requested = asyncio.Event()
        self._clamped: str | None = None
        # ProvisioningRequests answered after each cycle's rules (not in dry-run);
        # no scale-up starts while the breaker is open.
        self.provisioner = provisioner
        if provisioner is not None:
            provisioner.blocked = self._breaker_says

    @property
    def ruleset(self) -> RuleSet:
        return self.watcher.current

    def health(self) -> list[str]:
        """Why this controller cannot do its job now; empty when it can. ``/healthz``
        answers 503 with these (docs/controller.md, "What a probe sees"): failed
        evaluation cycles in a row, failed writes of the state record in a row, and
        lost watches. A source that is down is not among them: that is the
        source's state (``accel_autoscaler_source_up``), and no restart fixes it."""
        reasons: list[str] = []
        s = self.stats
        if s.failed_in_a_row >= MAX_FAILURES_IN_A_ROW:
            reasons.append(
                f"{s.failed_in_a_row} evaluation cycles in a row failed; the last: {s.last_failure}"
            )
        if s.record_failures_in_a_row >= MAX_FAILURES_IN_A_ROW:
            reasons.append(
                f"the state record could not be written {s.record_failures_in_a_row} times in "
                f"a row; the last: {s.last_record_failure}"
            )
        reasons.extend(self.lost_watches())
        return reasons

    def _failed(self, why: str) -> None:
        self.stats.failed_cycles += 1
        self.stats.failed_in_a_row += 1
        self.stats.last_failure = why[:500]

    def interval(self) -> float:
        """Seconds between cycles: the rule set's ``evaluationInterval``, clamped
        into ``MIN_INTERVAL``..``MAX_INTERVAL`` (not finite: the default) with one
        warning per bad value, so that no value can stop the loop for good."""
        value = self.ruleset.evaluation_interval
        if math.isfinite(value) and MIN_INTERVAL <= value <= MAX_INTERVAL:
            return value
        safe = (
            min(MAX_INTERVAL, max(MIN_INTERVAL, value))
            if math.isfinite(value)
            else RuleSet().evaluation_interval
        )
        if self._clamped != repr(value):  # once per bad value (NaN != NaN)
            log.warning(
                "evaluationInterval %r is outside %gs..%gs; evaluating every %gs instead",
                value,
                MIN_INTERVAL,
                MAX_INTERVAL,
                safe,
            )
        self._clamped = repr(value)
        return safe

    def request_reload(self) -> None:
        """SIGHUP: reload the rules now, whether or not their files changed, then
        run a cycle. Only sets events: safe from a signal handler."""
        self._reload_requested.set()

    async def watch_rules(self, period: float | None = None) -> None:
        """Looks at the rule files every ``period`` (``WATCH_PERIOD``) and reloads
        on SIGHUP, until cancelled; a reload that changes the rules, and every
        SIGHUP, wakes the evaluation loop. The load runs in a worker thread
        (``RuleWatcher.refresh``)."""
        period = WATCH_PERIOD if period is None else period
        while True:
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._reload_requested.wait(), timeout=period)
            forced = self._reload_requested.is_set()
            self._reload_requested.clear()
            try:
                changed = await self.watcher.refresh(force=forced)
            except asyncio.CancelledError:
                raise
            except Exception:  # refresh answers every failure itself; belt and braces
                log.exception("looking at the rule files failed")
                continue
            if changed or forced:
                self._wake.set()

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
        if self.store is not None:
            ingest(self.store, self.cluster_rows, now)

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

    def _resume_ladders(self) -> int:
        """Run again each ladder step whose outcome was never reported and that the
        executor's resume did not pick up from a node entry."""
        assert self.executor is not None
        n = 0
        rules = {r.name: r for r in self.ruleset.rules}
        for (name, target), ladder in sorted(self.state.ladders.items()):
            rule = rules.get(name)
            if rule is None or ladder.outcome is not None:
                continue
            if (name, target) in self.executor.resumed:
                continue
            action = rule.step(ladder.step).action
            self.executor.submit(
                Decision(
                    rule=name,
                    kind="act",
                    action=action.type,
                    params=dict(action.params),
                    target=dict(target),
                    sample_labels=ladder.labels or target,
                    sample_value=0.0,
                    at=self.clock(),
                    dry_run=self.dry_run,
                    reason=f"resuming ladder step {ladder.step} after a restart",
                    extra={"step": ladder.step, "incident": ladder.started, "resumed": True},
                )
            )
            n += 1
        if n:
            log.info("resuming %d escalation ladder step(s) with no outcome yet", n)
        return n

    async def restore(self) -> bool:
        """Rebuild the engine state from the cluster and resume the in-flight work,
        once per start or leadership gain (a no-op when done already). False when
        the API server could not be read: the next cycle tries again."""
        async with self.lock:
            return await self._restore()

    def stand_down(self) -> None:
        """This replica lost the lead: its memory is stale from now on, and the
        next gain rebuilds it."""
        if self.executor is not None:
            self.restored = False

    async def _restore(self) -> bool:
        if self.restored or self.executor is None:
            self.restored = True
            return True
        if not await self._rebuild():
            return False
        self.restored = True
        await self.executor.resume({r.name for r in self.ruleset.rules})
        self._resume_ladders()
        return True

    async def _rebuild(self) -> bool:
        """The engine state from the nodes and the state record (engine/restore.py)."""
        assert self.executor is not None
        ctx = self.executor.ctx
        try:
            nodes = await ctx.kube.list_nodes()
            now = self.clock()
            record = await self.record.read(now) if self.record is not None else None
            found = restore(self.state, nodes, record, ctx.controller, self.ruleset, self.clock())
        except Exception as e:  # KubeError, or anything one object could raise
            self.stats.state_record_errors += 1
            self._failed(f"cannot rebuild the remediation state from the cluster: {e}")
            log.warning("cannot rebuild the remediation state from the cluster yet: %s", e)
            return False
        if self.record is not None:
            self.stats.record_refused += self.record.refused
        log.info("remediation state rebuilt from the cluster: %s", found.summary())
        return True

    async def _persist(self) -> None:
        if self.record is None or self.dry_run or self.executor is None:
            return
        try:
            current = await self.record.write(self.state)
        except KubeError as e:
            self.stats.state_record_errors += 1
            self.stats.record_failures_in_a_row += 1
            self.stats.last_record_failure = str(e)[:500]
            log.warning("cannot write the state record: %s", e)
            return
        self.stats.record_failures_in_a_row = 0
        if not current:
            # Another replica wrote the record: this one's memory is stale. Take the
            # cluster's word (without resuming anything: its own tasks still run).
            self.stats.state_record_errors += 1
            await self._rebuild()

    async def cycle(self) -> list[Decision]:
        """One evaluation (``engine/cycle.py``), if this replica leads and its state
        was rebuilt from the cluster. Changed rule files are picked up first, unless
        a load is running already (the cycle then goes on with the rules in force
        rather than wait on it). The lock keeps an API call (breaker reset) and the
        loop from interleaving on the engine state."""
        if not self.watcher.busy:
            await self.watcher.refresh()
        async with self.lock:
            # Alerts whose TTL or endsAt passed go here, once a cycle: /metrics
            # only counts the live ones, and reading it changes nothing.
            self.alerts.expire(self.clock())
            if not self.leading():
                if self.stats.standby == 0:
                    log.info("standing by: another replica holds the leader lease")
                self.stats.standby += 1
                self.stand_down()
                return []
            if not await self._restore():
                self.stats.unrestored += 1
                return []  # counted as failed by _rebuild
            start = time.perf_counter()
            if self._retained is not self.ruleset:
                self._retained = self.ruleset
                retain(self.source, self.ruleset)
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
            self.stats.failed_in_a_row = 0
            self.stats.last_duration = time.perf_counter() - start
            self.stats.last_timestamp = now
            await self._persist()
            await self._provision()
            return result.decisions

    def _breaker_says(self) -> str | None:
        return "the circuit breaker is open" if self.state.breaker_open else None

    async def _provision(self) -> None:
        """One pass over the ProvisioningRequests (autoscaler/provisioning.py): an
        API error is counted and logged, never fatal; the next cycle resumes."""
        if self.provisioner is None or self.dry_run:
            return
        try:
            await self.provisioner.reconcile()
        except (KubeError, ValueError) as e:
            self.stats.provisioning_errors += 1
            log.warning("cannot answer the ProvisioningRequests this cycle: %s", e)

    async def run_forever(self) -> None:
        """Cycles every ``interval()``, and at once when woken (new rules, SIGHUP),
        with the rule files watched beside it; until cancelled."""
        loop = asyncio.get_running_loop()
        watch = asyncio.create_task(self.watch_rules())
        try:
            while True:
                started = loop.time()
                # A wake while the cycle runs (its rules changed) runs the next at once.
                self._wake.clear()
                try:
                    await self.cycle()
                except asyncio.CancelledError:
                    raise
                except Exception as e:  # the loop must outlive any one bad cycle
                    self._failed(f"{type(e).__name__}: {e}")
                    log.exception("evaluation cycle failed")
                left = self.interval() - (loop.time() - started)
                if left > 0:
                    with contextlib.suppress(TimeoutError):
                        await asyncio.wait_for(self._wake.wait(), timeout=left)
        finally:
            watch.cancel()
            await asyncio.gather(watch, return_exceptions=True)


class LeaderLabel:
    """Puts ``accel-fleet.io/leader: "true"`` on this replica's pod while it leads
    (``$POD_NAMESPACE``/``$POD_NAME`` from the downward API); without them, outside a
    pod, it does nothing. A failure is logged: the standby also answers the webhook
    with 503, so Alertmanager retries until it reaches the leader."""

    def __init__(self, kube: Kube) -> None:
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
