"""What each arriving job is drawn with: its run time and the pool it is drawn for.

Why a module of its own: the draws are the workload's randomness, read from the
job stream (``rng_job``) in a fixed order so that the rules run and the baseline
see the same jobs; keeping them apart from the Job controller (``jobs.py``) keeps
that order in one readable place.
"""

from __future__ import annotations

import math

import numpy as np

from autoscaler.simulate.scenario import Scenario


def draw_duration(scenario: Scenario, rng: np.random.Generator) -> float:
    """A job's run time at full speed on its reference device."""
    d = scenario.workload.duration
    if d.distribution == "lognormal":
        return float(d.median * math.exp(d.sigma * rng.standard_normal()))
    if d.distribution == "exponential":
        return float(rng.exponential(d.mean))
    return d.value


def draw_pool(scenario: Scenario, size: int, rng: np.random.Generator) -> str:
    """The pool a job of ``size`` devices is drawn for, by weight, among those
    whose nodes hold it (a gang: a whole number of their nodes)."""
    w = scenario.workload
    per_node = {p.name: p.devices_per_node for p in scenario.pools}
    if w.pools:
        names = [p for p, _ in w.pools]
        pw = np.array([x for _, x in w.pools], dtype=float)
    else:
        names = [p.name for p in scenario.pools]
        pw = np.array([p.initial * p.devices_per_node for p in scenario.pools], float)
    gangs = w.gang_kind is not None
    fits = [(per := per_node[n]) >= size or (gangs and size % per == 0) for n in names]
    pw = np.where(np.array(fits), pw, 0.0)
    draw = int(rng.choice(len(names), p=pw / pw.sum())) if pw.sum() > 0 else 0
    return names[draw]


__all__ = ["draw_duration", "draw_pool"]
