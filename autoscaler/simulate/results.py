"""What a simulation run yields, and how it is shown: ``RunResult``,
``summary.json`` (the keys in ``SUMMARY_KEYS``, rules beside baseline), the
terminal table and the progress bar. ``plots.py`` draws from the same results.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, TextIO

import numpy as np

from autoscaler.simulate.accounting import Stats, Timeline
from autoscaler.simulate.scenario import Scenario

SUMMARY_KEYS = (
    "jobs_submitted",
    "jobs_completed",
    "jobs_lost",
    "device_hours_allocated",
    "device_hours_useful",
    "goodput_ratio",
    "node_hours",
    "time_to_remediate_seconds",
    "queue_wait_seconds",
    "actions",
    "breaker_trips",
    "wall_seconds",
)


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


Progress = Callable[[str, float], None]


def _percentile(values: list[float], q: float) -> float:
    if not values:
        return 0.0
    return round(float(np.percentile(np.array(values), q, method="linear")), 3)


def summary_section(result: RunResult) -> dict[str, Any]:
    """One run's figures, under ``SUMMARY_KEYS``, in that order."""
    s = result.stats
    allocated = s.device_seconds_allocated / 3600.0
    useful = s.device_seconds_useful / 3600.0
    return {
        "jobs_submitted": s.submitted,
        "jobs_completed": s.completed,
        "jobs_lost": s.lost,
        "device_hours_allocated": round(allocated, 3),
        "device_hours_useful": round(useful, 3),
        "goodput_ratio": round(useful / allocated, 4) if allocated > 0 else 0.0,
        "node_hours": round(s.node_seconds / 3600.0, 3),
        "time_to_remediate_seconds": {
            "p50": _percentile(s.remediation, 50),
            "p99": _percentile(s.remediation, 99),
            "max": round(max(s.remediation), 3) if s.remediation else 0.0,
        },
        "queue_wait_seconds": {
            "p50": _percentile(s.queue_wait, 50),
            "p95": _percentile(s.queue_wait, 95),
        },
        "actions": dict(sorted(s.actions.items())),
        "breaker_trips": s.breaker_trips,
        "wall_seconds": round(result.wall_seconds, 3),
    }


def summary(results: dict[str, RunResult], scenario: Scenario, seed: int) -> dict[str, Any]:
    doc: dict[str, Any] = {
        "scenario": scenario.name,
        "seed": seed,
        "duration_hours": round(scenario.duration / 3600.0, 3),
        "evaluation_interval_seconds": scenario.evaluation_interval,
    }
    for mode in ("rules", "baseline"):
        if mode in results:
            doc[mode] = summary_section(results[mode])
    return doc


# -- terminal output -----------------------------------------------------------------


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

    for key in SUMMARY_KEYS:
        a, b = rules.get(key), base.get(key)
        if isinstance(a, dict) or isinstance(b, dict):
            subkeys = list((a or {}).keys()) or list((b or {}).keys())
            if key == "actions":
                subkeys = sorted(set((a or {}).keys()) | set((b or {}).keys()))
                if not subkeys:
                    rows.append((key, "0", "0"))
            for sub in subkeys:
                rows.append(
                    (f"{key}.{sub}", fmt((a or {}).get(sub, 0)), fmt((b or {}).get(sub, 0)))
                )
        else:
            rows.append((key, fmt(a) if a is not None else "-", fmt(b) if b is not None else "-"))
    w0 = max(len(r[0]) for r in rows)
    w1 = max(len("rules"), *(len(r[1]) for r in rows))
    w2 = max(len("baseline"), *(len(r[2]) for r in rows))
    lines = [f"{'':<{w0}}  {'rules':>{w1}}  {'baseline':>{w2}}"]
    lines += [f"{k:<{w0}}  {a:>{w1}}  {b:>{w2}}" for k, a, b in rows]
    return "\n".join(lines)
