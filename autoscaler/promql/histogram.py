"""``histogram_quantile`` over classic (``le``-labelled) buckets, all at once.

Why a module of its own: latency rules are written with it, and it is the one
function that regroups series by a label before computing. Here every histogram
of the vector is one row of a (histograms × buckets) matrix: the ``le`` values
are parsed once per distinct value, buckets are sorted and coalesced with one
``lexsort`` and ``bincount``, made monotonic with ``maximum.accumulate`` along
the rows, and the quantile is interpolated for every row together.

Semantics are ``funcHistogramQuantile`` and ``bucketQuantile`` of Prometheus
v2.42.0: series are grouped by all their labels but ``le`` (the metric name
included; the result drops both, so two metrics with the same other labels
collide, an error); a series whose ``le`` does not parse is ignored; a
histogram without a ``+Inf`` bucket, with fewer than two buckets or with no
observations gives NaN; φ < 0 gives -Inf, φ > 1 +Inf. Native histograms are
not stored, so never read.
"""

from __future__ import annotations

import math

import numpy as np

from autoscaler.promql.symbols import F64, I64, Mask, Symbols
from autoscaler.promql.vectors import Vec, check_unique, empty, groups_of, label_key


def _bounds(codes: I64, symbols: Symbols) -> tuple[F64, Mask]:
    """Each ``le`` value parsed, and whether it parsed (once per distinct value)."""
    distinct, back = np.unique(codes, return_inverse=True)
    parsed = np.full(len(distinct), math.nan)
    ok = np.zeros(len(distinct), dtype=np.bool_)
    for i, code in enumerate(distinct.tolist()):
        try:
            parsed[i] = float(symbols.string(code).strip()) if code else math.nan
            ok[i] = bool(code)
        except ValueError:
            pass
    back = back.reshape(-1)
    return parsed[back], ok[back]


def histogram_quantile(q: float, vec: Vec, symbols: Symbols) -> Vec:
    """The φ-quantile of each classic histogram in ``vec``."""
    le = vec.cols.get("le")
    if le is None or not len(vec):
        return empty()
    upper, ok = _bounds(le, symbols)
    vec = vec.take(ok)
    upper = upper[ok]
    if not len(vec):
        return empty()
    names = sorted(k for k in vec.cols if k != "le")
    first, group = groups_of(label_key(vec, names))
    groups = len(first)
    # Coalesce buckets with the same bound, then lay each histogram out as a row.
    pair_order = np.lexsort((upper, group))
    g, u, c = group[pair_order], upper[pair_order], vec.values[pair_order]
    new = np.r_[True, (g[1:] != g[:-1]) | (u[1:] != u[:-1])]
    slot = np.cumsum(new) - 1
    counts = np.bincount(slot, weights=c)
    g, u = g[new], u[new]
    n = np.bincount(g, minlength=groups)
    starts = np.concatenate(([0], np.cumsum(n)[:-1]))
    position = np.arange(len(g)) - starts[g]
    width = int(n.max())
    ub = np.full((groups, width), math.inf)
    cnt = np.zeros((groups, width))
    ub[g, position] = u
    cnt[g, position] = counts
    with np.errstate(all="ignore"):
        cnt = np.fmax.accumulate(cnt, axis=1)
        rows = np.arange(groups)
        last = np.maximum(n - 1, 0)
        observations = cnt[rows, last]
        rank = q * observations
        columns = np.arange(width)[None, :]
        hit = (cnt >= rank[:, None]) & (columns < (n - 1)[:, None])
        b = np.where(hit.any(axis=1), hit.argmax(axis=1), n - 1)
        prev = np.maximum(b - 1, 0)
        start = np.where(b > 0, ub[rows, prev], 0.0)
        end = ub[rows, b]
        count = cnt[rows, b] - np.where(b > 0, cnt[rows, prev], 0.0)
        r = rank - np.where(b > 0, cnt[rows, prev], 0.0)
        out = start + (end - start) * (r / count)
        out = np.where((b == 0) & (ub[:, 0] <= 0), ub[:, 0], out)
        below_top = ub[rows, np.maximum(n - 2, 0)]
        out = np.where(b == n - 1, below_top, out)
        bad = ~np.isinf(ub[rows, last]) | (ub[rows, last] < 0) | (n < 2) | (observations == 0)
        out = np.where(bad, math.nan, out)
    if math.isnan(q):
        out = np.full(groups, math.nan)
    elif q < 0:
        out = np.full(groups, -math.inf)
    elif q > 1:
        out = np.full(groups, math.inf)
    cols = {k: vec.cols[k][first] for k in names if k != "__name__"}
    result = Vec(cols, np.asarray(out, dtype=np.float64))
    check_unique(result)
    return result


__all__ = ["histogram_quantile"]
