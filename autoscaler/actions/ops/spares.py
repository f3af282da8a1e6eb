"""The spare-node buffer of a pool: how many idle nodes ``scale_node_pool`` keeps so
that a gang restarting after a node fault does not wait for a new node.

Why a module of its own: the size is a small piece of arithmetic with a rationale
that people must be able to check against their own fleet, and the simulator
reports what it costs. Keeping it apart from the scaling sequence keeps both
readable and lets a test check the formula by itself.

The formula. After a node fault, the gang restarts on a spare (its restart takes
``restartOverhead``); the buffer is then one short, and the next scale-up asks for
a node, which is Ready ``provisioningTime`` later. So each fault takes a spare for
a window of W = restartOverhead + provisioningTime. With pool faults arriving at
λ per node-hour on each of the pool's N nodes, the faults that land in one window
are Poisson with mean μ = λ · N · W (hours). The buffer is the smallest s with
P(Poisson(μ) ≤ s) ≥ ``spareQuantile``: with that probability every fault of a
window finds a spare, and no gang waits for provisioning. It is capped at
``maxSpares``, and is 0 when λ is 0 (the default: no buffer).

λ is the observed rate when ``spareFaultRateQuery`` is set (a PromQL expression
whose first sample is faults per node-hour for the pool, ``$pool`` standing for
the pool's name as a quoted label value), else ``spareFaultRate``. An unknown
query answer falls back to ``spareFaultRate`` and says so.

Worked example (docs/actions.md has it too): Meta's Llama 3 fleet saw 1.97e-5
interruptions per GPU-hour, 1.58e-4 per 8-GPU node-hour; a pool of 2,048 nodes
with a 10-minute provisioning time and a 10-minute restart overhead has
μ = 1.58e-4 · 2048 · (20/60) = 0.108, and at ``spareQuantile`` 0.999 the buffer
is 2 nodes (P(X ≤ 1) = 0.9946, P(X ≤ 2) = 0.99981).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from autoscaler.actions.context import ActionContext
from autoscaler.promql.matchers import quote
from autoscaler.types import Unknown, Vector

POOL_PLACEHOLDER = "$pool"
# Poisson terms summed at most (far past any quantile a pool's μ needs).
MAX_TERMS = 10_000


def poisson_quantile(mu: float, q: float) -> int:
    """The smallest s with P(X <= s) >= q for X ~ Poisson(mu)."""
    if mu <= 0:
        return 0
    # Terms by recurrence in log space: e^-μ underflows for large μ.
    log_term = -mu
    total = math.exp(log_term)
    s = 0
    while total < q and s < MAX_TERMS:
        s += 1
        log_term += math.log(mu) - math.log(s)
        total += math.exp(log_term)
    return s


@dataclass(frozen=True)
class SpareSize:
    spares: int
    rate: float  # λ, node faults per node-hour
    mean: float  # μ, expected faults in one window
    window: float  # W, seconds
    source: str  # where λ came from, for the outcome and the Event

    def explain(self) -> str:
        return (
            f"spare buffer {self.spares}: λ={self.rate:.3g}/node-hour ({self.source}), "
            f"W={self.window / 60:g} min, μ={self.mean:.3g}"
        )


def size(
    rate: float,
    nodes: int,
    *,
    provisioning_time: float,
    restart_overhead: float,
    quantile: float,
    max_spares: int,
    source: str = "spareFaultRate",
) -> SpareSize:
    """The buffer for ``nodes`` nodes faulting at ``rate`` per node-hour (see the
    module docstring)."""
    window = provisioning_time + restart_overhead
    mean = max(0.0, rate) * max(0, nodes) * window / 3600.0
    spares = min(max_spares, poisson_quantile(mean, quantile))
    return SpareSize(spares, rate, mean, window, source)


async def observed_rate(
    ctx: ActionContext, query: str, pool: str, fallback: float
) -> tuple[float, str]:
    """λ from ``query`` (``$pool`` replaced), or ``fallback`` and why."""
    if not query:
        return fallback, "spareFaultRate"
    if ctx.query is None:
        return fallback, "spareFaultRate; no metrics source for spareFaultRateQuery"
    result = await ctx.query(query.replace(POOL_PLACEHOLDER, quote(pool)), ctx.clock())
    if isinstance(result, Unknown):
        return fallback, f"spareFaultRate; spareFaultRateQuery unknown: {result.reason}"
    if not isinstance(result, Vector) or not result.samples:
        return fallback, "spareFaultRate; spareFaultRateQuery gave no sample"
    value = result.samples[0].value
    if not math.isfinite(value) or value < 0:
        return fallback, f"spareFaultRate; spareFaultRateQuery gave {value}"
    return value, "observed by spareFaultRateQuery"


__all__ = ["POOL_PLACEHOLDER", "SpareSize", "observed_rate", "poisson_quantile", "size"]
