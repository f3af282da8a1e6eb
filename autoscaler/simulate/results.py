"""What a simulation run yields, and how it is shown: ``RunResult``,
``summary.json`` (the keys in ``SUMMARY_KEYS``, rules beside baseline, and
``kueue`` where the scenario runs Kueue), the
terminal table and the progress bar. ``plots.py`` draws from the same results.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, TextIO

import numpy as np

from autoscaler.simulate.accounting import REMEDIATED_WHEN, Stats, Timeline
from autoscaler.simulate.scenario import Scenario

SUMMARY_KEYS = (
    "jobs_submitted",
    "jobs_completed",
    "jobs_lost",
    "device_hours_allocated",
    "device_hours_useful",
    "goodput_ratio",
    "node_hours",
    "goodput_by_job_size",
    "time_to_remediate_seconds",
    "time_to_remediate_seconds_by_kind",
    "faults_closed_by",
    "faults_closed_by_vendor",
    "time_to_healthy_capacity_seconds",
    "unhealthy_node_hours",
    "unhealthy_device_hours",
    "lost_device_hours",
    "restarts_per_job",
    "false_requeues",
    "spare_node_hours",
    "queue_wait_seconds",
    "job_completion_seconds",
    "actions",
    "actions_by_outcome",
    "breaker_trips",
    "wall_seconds",
)
# Only where the scenario runs Kueue: per ClusterQueue, its figures (kueue.py).
KUEUE_KEY = "kueue"
# ``lost_device_hours``' keys, by the accounting's causes.
LOSS_KEYS = {
    "redone": "redone_since_checkpoint",
    "detection": "detection_delay",
    "restart_overhead": "restart_overhead",
    "capacity_wait": "capacity_wait",
}


@dataclass
class RunResult:
    mode: str  # "rules" or "baseline"
    stats: Stats
    timeline: Timeline
    wall_seconds: float
    cycles: int = 0
    outcomes: dict[str, int] = field(default_factory=dict)
    # Calls the actions (and the cluster-state reads) made, by Kube method.
    kube_calls: dict[str, int] = field(default_factory=dict)
    # Finished decisions by ``<type>[:recover]:<status>`` (summary.json's
    # ``actions_by_outcome``).
    by_outcome: dict[str, int] = field(default_factory=dict)


Progress = Callable[[str, float], None]


def _percentile(values: list[float], q: float) -> float:
    if not values:
        return 0.0
    return round(float(np.percentile(np.array(values), q, method="linear")), 3)


def _spread(values: list[float]) -> dict[str, float]:
    return {
        "p50": _percentile(values, 50),
        "p99": _percentile(values, 99),
        "max": round(max(values), 3) if values else 0.0,
    }


def summary_section(result: RunResult) -> dict[str, Any]:
    """One run's figures, under ``SUMMARY_KEYS``, in that order."""
    s = result.stats
    by_size = {
        str(size): round(s.useful_by_size.get(size, 0.0) / held, 4)
        for size, held in sorted(s.allocated_by_size.items())
        if held > 0
    }
    allocated = s.device_seconds_allocated / 3600.0
    useful = s.device_seconds_useful / 3600.0
    queues = {KUEUE_KEY: {q: dict(f) for q, f in sorted(s.queues.items())}} if s.queues else {}
    return {
        "jobs_submitted": s.submitted,
        "jobs_completed": s.completed,
        "jobs_lost": s.lost,
        "device_hours_allocated": round(allocated, 3),
        "device_hours_useful": round(useful, 3),
        "goodput_ratio": round(useful / allocated, 4) if allocated > 0 else 0.0,
        "node_hours": round(s.node_seconds / 3600.0, 3),
        "goodput_by_job_size": by_size,
        "time_to_remediate_seconds": _spread(s.remediation),
        "time_to_remediate_seconds_by_kind": {
            kind: _spread(values) for kind, values in sorted(s.remediation_by_kind.items())
        },
        "faults_closed_by": dict(s.closed_by),
        "faults_closed_by_vendor": {
            vendor: {by: n for by, n in counts.items() if n}
            for vendor, counts in sorted(s.closed_by_vendor.items())
        },
        "time_to_healthy_capacity_seconds": _spread(s.time_to_healthy),
        "unhealthy_node_hours": round(s.unhealthy_node_seconds / 3600.0, 3),
        "unhealthy_device_hours": round(s.unhealthy_device_seconds / 3600.0, 3),
        "lost_device_hours": {
            key: round(s.lost_by_cause.get(cause, 0.0) / 3600.0, 3)
            for cause, key in LOSS_KEYS.items()
        },
        "restarts_per_job": {str(n): jobs for n, jobs in sorted(s.restarts.items())},
        "false_requeues": s.false_requeues,
        "spare_node_hours": round(s.spare_node_seconds / 3600.0, 3),
        "queue_wait_seconds": {
            "p50": _percentile(s.queue_wait, 50),
            "p95": _percentile(s.queue_wait, 95),
        },
        # None where no job completed: a time that was not measured, not 0.
        "job_completion_seconds": {
            "mean": round(float(np.mean(s.completion)), 3) if s.completion else None,
            "p50": _percentile(s.completion, 50) if s.completion else None,
            "p95": _percentile(s.completion, 95) if s.completion else None,
        },
        "actions": dict(sorted(s.actions.items())),
        "actions_by_outcome": dict(sorted(result.by_outcome.items())),
        "breaker_trips": s.breaker_trips,
        "wall_seconds": round(result.wall_seconds, 3),
    } | queues


def summary(results: dict[str, RunResult], scenario: Scenario, seed: int) -> dict[str, Any]:
    doc: dict[str, Any] = {
        "scenario": scenario.name,
        "seed": seed,
        "duration_hours": round(scenario.duration / 3600.0, 3),
        "evaluation_interval_seconds": scenario.evaluation_interval,
        "time_to_remediate_until": REMEDIATED_WHEN,
    }
    for mode in ("rules", "baseline"):
        if mode in results:
            doc[mode] = summary_section(results[mode])
    return doc


# -- terminal output -----------------------------------------------------------------


class ProgressBar:
    """A bar on a terminal, a line per quarter otherwise (CI logs stay short)."""

    def __init__(self, stream: TextIO) -> None:
        self.stream = stream
        self.tty = stream.isatty()
        self.last: tuple[str, int] = ("", -1)
        self.started = time.perf_counter()

    def __call__(self, mode: str, fraction: float) -> None:
        pct = int(min(1.0, max(0.0, fraction)) * 100)
        if not self.tty:
            step = pct // 25 * 25
            if (mode, step) != self.last:
                self.stream.write(f"{mode}: {step}% simulated\n")
                self.stream.flush()
                self.last = (mode, step)
            return
        if (mode, pct) == self.last:
            return
        filled = pct * 30 // 100
        bar = "#" * filled + "-" * (30 - filled)
        elapsed = time.perf_counter() - self.started
        self.stream.write(f"\r{mode:>8} [{bar}] {pct:3d}%  {elapsed:6.1f}s")
        if pct >= 100:
            self.stream.write("\n")
        self.stream.flush()
        self.last = (mode, pct)


def table(doc: dict[str, Any]) -> str:
    """The two sections side by side, one metric a row."""
    rows: list[tuple[str, str, str]] = []
    rules, base = doc.get("rules", {}), doc.get("baseline", {})

    def fmt(v: Any) -> str:
        if isinstance(v, float):
            return f"{v:,.4g}" if abs(v) < 1 else f"{v:,.1f}"
        if isinstance(v, int):
            return f"{v:,}"
        return str(v)

    def add(key: str, a: Any, b: Any) -> None:
        if isinstance(a, dict) or isinstance(b, dict):
            a, b = a or {}, b or {}
            # Both runs' keys: a kind of fault, a job size or a restart count that
            # only one run has shows 0 in the other.
            subkeys = list(a) + [k for k in b if k not in a]
            if key in ("actions", "actions_by_outcome"):
                subkeys.sort()
            elif key in ("restarts_per_job", "goodput_by_job_size"):
                subkeys.sort(key=lambda k: (len(k), k))  # numbers, in order
            if not subkeys:
                rows.append((key, "0", "0"))
            # A count that one run lacks is 0 there; a figure it lacks ("-") is
            # one it has nothing to measure for (no such fault hit a job).
            top = key.split(".", 1)[0]
            counts = (
                "actions",
                "actions_by_outcome",
                "restarts_per_job",
                "faults_closed_by",
                "faults_closed_by_vendor",
            )
            missing = 0 if top in counts else None
            for sub in subkeys:
                add(f"{key}.{sub}", a.get(sub, missing), b.get(sub, missing))
        else:
            rows.append((key, fmt(a) if a is not None else "-", fmt(b) if b is not None else "-"))

    for key in SUMMARY_KEYS:
        add(key, rules.get(key), base.get(key))
    if KUEUE_KEY in rules or KUEUE_KEY in base:
        add(KUEUE_KEY, rules.get(KUEUE_KEY), base.get(KUEUE_KEY))
    w0 = max(len(r[0]) for r in rows)
    w1 = max(len("rules"), *(len(r[1]) for r in rows))
    w2 = max(len("baseline"), *(len(r[2]) for r in rows))
    lines = [f"{'':<{w0}}  {'rules':>{w1}}  {'baseline':>{w2}}"]
    lines += [f"{k:<{w0}}  {a:>{w1}}  {b:>{w2}}" for k, a, b in rows]
    return "\n".join(lines)
