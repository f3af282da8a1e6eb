"""Carrying decisions out: one asyncio task per decision, serialised per target.

The evaluation loop must never wait for the cluster (a drain that a
PodDisruptionBudget holds up can take its whole ``drainTimeout``), so each
decision runs as its own task. Two decisions about the same node (an act and
then its recover, or two rules on one node) run one after the other, in the
order the engine made them; different nodes run side by side. The engine's
limits (``maxConcurrentDrains``, per-rule ``maxConcurrent``) already bound how
many there are.

On taking the lead (or starting), ``resume`` re-runs the in-flight work recorded
in node annotations by this controller: each action is idempotent, so a resumed
drain finishes the drain and evicts nothing twice (autoscaler/actions/ops/ownership.py).
Work whose rule left the rule set meanwhile is ended where it stands instead: what
it did stays done, and it starts no new step.

Every outcome is counted (``accel_autoscaler_actions_total``), timed from the
decision to the task's first API call and to its end, and kept (the last 500)
for ``GET /api/v1/actions``, and handed to ``on_outcome`` (``autoscaler/wiring.py``
puts a ladder step's outcome in the engine state there: a ``failed`` step escalates
at once, ``engine/ladder.py``; an act that did nothing gives back its place in the
hourly count). Both hooks are given to the constructor: the
executor is never rewired after it is built.

Escalation ladders: a decision that is a step of a ladder (``extra["step"]``)
writes a ``RemediationStep`` Event on its node before its action runs (the
action's own Events follow), so ``kubectl describe node`` shows each rung. A
resumed in-flight entry of a ladder's rule gets its step back from ``ladder_step``
(the engine state), so its outcome still reaches the ladder; its Event is not
written twice.

Each task runs with a copy of the context (``dataclasses.replace``) whose ``kube``
notes the task's first API call and whose ``dry_run`` is the decision's too.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections import Counter, deque
from collections.abc import Callable, Collection, Mapping
from dataclasses import dataclass, replace
from typing import Any

from autoscaler.actions import ACTIONS
from autoscaler.actions.context import ActionContext, Outcome
from autoscaler.actions.ops.drain import abandon
from autoscaler.actions.ops.ownership import IN_FLIGHT, Entry, entries, event, node_ref, ours
from autoscaler.decision import Decision
from autoscaler.kube.errors import KubeError
from autoscaler.kube.names import target_problems
from autoscaler.kube.protocol import Kube

log = logging.getLogger("accel_autoscaler.executor")

HISTORY = 500
STATUSES = ("done", "partial", "skipped", "failed", "unknown")

# Where an outcome goes besides the history (the engine state: autoscaler/wiring.py).
OnOutcome = Callable[[Decision, Outcome], None]
# (rule, target, action) -> the ladder extra of a resumed entry, or None.
LadderStep = Callable[[str, Mapping[str, str], str], Mapping[str, Any] | None]


def serial_key(d: Decision) -> tuple[str, ...]:
    """Decisions with the same key run in order, one at a time."""
    t = d.target
    if "node" in t:
        return ("node", t["node"])
    if "pod" in t:
        return ("pod", t.get("namespace", ""), t["pod"])
    if "pool" in t:
        return ("pool", t["pool"])
    return ("target", *sorted(f"{k}={v}" for k, v in t.items()))


@dataclass(frozen=True)
class Record:
    decision: Decision
    outcome: Outcome
    started: float
    # Seconds from the decision's submission to its first API call, and to its end.
    first_call: float | None
    duration: float

    def as_json(self) -> dict[str, Any]:
        return {
            "decision": self.decision.as_json(),
            "outcome": self.outcome.as_json(),
            "started": self.started,
            "firstCallSeconds": self.first_call,
            "durationSeconds": self.duration,
        }


class _Timed:
    """Wraps the context's Kube to note when a task makes its first call. Every
    method of ``Kube`` passes through ``__getattr__``, so it is a ``Kube``
    wherever the protocol is asked for."""

    def __init__(self, inner: Kube, on_call: Callable[[], None]) -> None:
        self._inner = inner
        self._on_call = on_call

    def __getattr__(self, name: str) -> Any:
        attr = getattr(self._inner, name)
        if not callable(attr):
            return attr

        def call(*args: Any, **kwargs: Any) -> Any:
            self._on_call()
            return attr(*args, **kwargs)

        return call


class Executor:
    """Runs decisions with ``ctx``. ``on_outcome`` hears every outcome after it is
    kept; ``ladder_step`` gives a resumed entry its ladder step back (both from
    ``autoscaler/wiring.py`` in the controller and the simulator; None: nobody
    listens, as in the actions' own tests)."""

    def __init__(
        self,
        ctx: ActionContext,
        *,
        on_outcome: OnOutcome | None = None,
        ladder_step: LadderStep | None = None,
    ) -> None:
        self.ctx = ctx
        self._tails: dict[tuple[str, ...], asyncio.Task[None]] = {}
        self._tasks: set[asyncio.Task[None]] = set()
        # (rule, action, status): accel_autoscaler_actions_total's labels.
        self.outcomes: Counter[tuple[str, str, str]] = Counter()
        # (action, kind, status): acts apart from recovers, for the simulator's
        # summary (``actions_by_outcome``).
        self.by_kind: Counter[tuple[str, str, str]] = Counter()
        self.history: deque[Record] = deque(maxlen=HISTORY)
        self.first_call_seconds: deque[float] = deque(maxlen=HISTORY)
        self.duration_seconds: dict[str, deque[float]] = {}
        self.on_outcome = on_outcome
        self.ladder_step = ladder_step
        # (rule, target) of the decisions the last ``resume`` submitted.
        self.resumed: set[tuple[str, tuple[tuple[str, str], ...]]] = set()

    @property
    def in_flight(self) -> int:
        return sum(1 for t in self._tasks if not t.done())

    def submit(self, decision: Decision) -> asyncio.Task[None]:
        """Run ``decision`` after any earlier decision about the same target."""
        key = serial_key(decision)
        previous = self._tails.get(key)
        submitted = time.perf_counter()
        task = asyncio.create_task(self._run(decision, previous, submitted))
        self._tails[key] = task
        self._tasks.add(task)

        def done(t: asyncio.Task[None], key: tuple[str, ...] = key) -> None:
            self._tasks.discard(t)
            if self._tails.get(key) is t:
                del self._tails[key]

        task.add_done_callback(done)
        return task

    async def _run(
        self, d: Decision, previous: asyncio.Task[None] | None, submitted: float
    ) -> None:
        if previous is not None:
            await asyncio.gather(previous, return_exceptions=True)
        spec = ACTIONS.get(d.action)
        first: list[float] = []

        def on_call() -> None:
            if not first:
                first.append(time.perf_counter() - submitted)

        timed = _Timed(self.ctx.kube, on_call)
        ctx = replace(self.ctx, kube=timed, dry_run=self.ctx.dry_run or d.dry_run)
        started = self.ctx.clock()
        bad_names = target_problems(d.target)
        if spec is None or spec.execute is None:
            outcome = Outcome("unknown", f"action {d.action} cannot be executed")
        elif bad_names:  # before any API call: a label like n1/status must not reach a path
            outcome = Outcome("unknown", "refused before any API call: " + "; ".join(bad_names))
        else:
            try:
                await self._step_event(ctx, d)
                outcome = await spec.execute(ctx, d)
            except asyncio.CancelledError:
                log.info("%s on %s stopped (leadership lost or shutting down)", d.action, d.target)
                raise
            except KubeError as e:
                # An API error says nothing about whether the remedy works.
                outcome = Outcome("unknown", f"Kubernetes API: {e}")
            except Exception as e:  # one broken action must not take the controller down
                log.exception("action %s for rule %s failed", d.action, d.rule)
                outcome = Outcome("unknown", f"{type(e).__name__}: {e}")
        duration = time.perf_counter() - submitted
        self.outcomes[(d.rule, d.action, outcome.status)] += 1
        self.by_kind[(d.action, d.kind, outcome.status)] += 1
        if first:
            self.first_call_seconds.append(first[0])
        self.duration_seconds.setdefault(d.action, deque(maxlen=HISTORY)).append(duration)
        self.history.append(Record(d, outcome, started, first[0] if first else None, duration))
        if self.on_outcome is not None:
            try:
                self.on_outcome(d, outcome)
            except Exception:  # the outcome is kept above; the ladder times out instead
                log.exception("reporting the outcome of %s for rule %s failed", d.action, d.rule)
        level = logging.WARNING if outcome.status in ("failed", "unknown") else logging.INFO
        log.log(
            level,
            "action %s %s: rule=%s target=%s%s: %s",
            d.action if d.kind == "act" else f"{d.action} (recover)",
            outcome.status,
            d.rule,
            dict(d.target),
            " dry-run" if ctx.dry_run else "",
            outcome.message,
        )

    async def _step_event(self, ctx: ActionContext, d: Decision) -> None:
        """The Event of a ladder step (``RemediationStep``) on the target's node."""
        step = d.extra.get("step")
        node = d.target.get("node")
        if d.kind != "act" or not isinstance(step, int) or not node or d.extra.get("resumed"):
            return
        await event(
            ctx,
            node_ref(node),
            "RemediationStep",
            f"rule {d.rule} step {step}: {d.action}" + (f": {d.reason}" if d.reason else ""),
            warning=step > 1,
            action=d.action,
        )

    async def resume(self, rules: Collection[str] | None = None) -> int:
        """Submit this controller's in-flight work recorded on the nodes. With
        ``rules`` (the rule names now loaded), work whose rule is not among them is
        not resumed but ended where it stands (``actions/ops/drain.py``, ``abandon``)."""
        try:
            nodes = await self.ctx.kube.list_nodes()
        except KubeError as err:
            log.warning("cannot list nodes to resume in-flight work: %s", err)
            return 0
        n = 0
        self.resumed = set()
        for node in nodes:
            for rule, e in entries(node).items():
                if not ours(e, self.ctx) or e.phase not in IN_FLIGHT:
                    continue
                if rules is not None and rule not in rules:
                    await self._abandon(node["metadata"]["name"], rule, e)
                    continue
                target = dict(e.target) or {"node": node["metadata"]["name"]}
                target.setdefault("node", node["metadata"]["name"])
                extra = self.ladder_step(rule, target, e.action) if self.ladder_step else None
                self.resumed.add((rule, tuple(sorted(target.items()))))
                self.submit(
                    Decision(
                        rule=rule,
                        kind="act",
                        action=e.action,
                        params=e.params,
                        target=target,
                        sample_labels=(),
                        sample_value=0.0,
                        at=self.ctx.clock(),
                        dry_run=self.ctx.dry_run,
                        reason=f"resuming {e.phase} started {e.started} by {e.replica or '?'}",
                        extra={**extra, "resumed": True} if extra else {},
                    )
                )
                n += 1
        if n:
            log.info("resuming %d remediation(s) in flight", n)
        return n

    async def _abandon(self, node: str, rule: str, entry: Entry) -> None:
        started = self.ctx.clock()
        d = Decision(
            rule=rule,
            kind="act",
            action=entry.action,
            params=entry.params,
            target=dict(entry.target) or {"node": node},
            sample_labels=(),
            sample_value=0.0,
            at=started,
            dry_run=self.ctx.dry_run,
            reason=f"in flight ({entry.phase}) after a restart, but its rule left the rule set",
        )
        outcome = await abandon(self.ctx, node, rule, entry)
        self.outcomes[(rule, entry.action, outcome.status)] += 1
        self.history.append(Record(d, outcome, started, None, 0.0))

    async def stop(self) -> None:
        """Cancel every running action (leadership lost, or shutting down). The
        annotations keep their in-flight phase, so the next leader resumes them."""
        tasks = list(self._tasks)
        for t in tasks:
            t.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        self._tails.clear()

    async def wait(self, timeout: float | None = None) -> None:
        """Wait for every submitted action (tests, the simulator, shutdown)."""
        tasks = list(self._tasks)
        if tasks:
            await asyncio.wait(tasks, timeout=timeout)


__all__ = ["STATUSES", "Executor", "LadderStep", "OnOutcome", "Record", "serial_key"]
