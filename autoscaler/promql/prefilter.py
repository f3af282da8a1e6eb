"""What a comparison with a number, or a join with few samples on its left,
leaves out before the vector or the window is built: the rows that cannot pass
it, or cannot match.

Why a module of its own: the rules filter large vectors by a bound far more often
than they keep them whole (``accel_link_throughput_bytes_per_second == 0`` over
every link, ``max_over_time(accel_node_ready[1m]) == 0`` over every node), and
what passes is nearly always a handful of rows or none. The evaluator builds the
whole vector first, label columns and windows included, then filters it. The
shapes here are recognised in the plan, and the rows that cannot pass are found
from what the family keeps per row, so only the others are built:

* **An instant selection compared with a number** (``X > c``, any comparison, no
  ``bool``): the selection's values are read anyway; the label columns are
  gathered only for the rows whose value passes.
* **``max_over_time(X[r])`` bounded above** (``== c``, ``<= c``, ``< c``) and
  **``min_over_time(X[r])`` bounded below** (``== c``, ``>= c``, ``> c``): a
  window's maximum is at least the number it ends with, so a row whose newest
  sample at or before the window's end is a number that fails the bound fails it
  over that window, and where that sample lies before the window, the window
  holds nothing and answers nothing. A row whose newest sample there is a stale
  marker is read in full. Only a selection of one family is filtered: over
  several, the full answer's duplicate label sets are an error that a smaller
  answer could miss.
* **A join whose right is a range function of a selector** (``A * on (node,
  device) group_left f(X[r])``, arithmetic or a comparison, one-to-one or
  many-to-one, on listed labels; or that function aggregated ``by`` exactly those
  labels), where A has few samples against X's series: only the series of X whose
  labels some sample of A has are windowed (``join_keys``). The series a join
  leaves unmatched change nothing but an error: two of X's answers with the same
  labels are Prometheus's "duplicate series" error, so the series that share their
  labels are computed (few or none), and where two of them answer, the whole is.
* **A set operator whose left has few samples** (``A unless on (node, device)
  X > 0``, X a selector, compared with a number or not): only the series of X
  with the labels of some sample of A are read into the vector.
* **``max by (...) (X) > c``** and its kin (``filters_extremes``): X is filtered
  before it is grouped (``Evaluator._filtered_extremes``).
* **A counter's rise bounded so that 0 fails** (``increase(X[r]) >= 3``, and
  ``max by (...) (rate(X[r])) > 0`` or ``sum by (...) (increase(X[r])) >= 10``):
  over a window in which a counter did not change, ``rate`` and ``increase`` are
  exactly 0 or nothing (``ranges.unchanged``), so only the counters that changed
  are windowed. Compared directly, the others are left out (the rows' order is
  kept); grouped, the answer is known to be empty when none of those that changed
  passes, and is computed whole otherwise (the groups' order is their first
  sample's in the whole vector). The fault rules read tens of thousands of
  counters of which nearly none moved.

In each case the comparison itself then runs as before on what is left, so the
samples, their values and their order are the full computation's.
"""

from __future__ import annotations

import numpy as np

from autoscaler.promql.binops import elementwise, signatures
from autoscaler.promql.family import Family
from autoscaler.promql.over_time import POINT_FUNCTIONS
from autoscaler.promql.plans import Aggregate, Binary, Call, Num, Plan, RangeSelect, Select
from autoscaler.promql.ranges import unchanged
from autoscaler.promql.symbols import F64, I64, Mask
from autoscaler.promql.vectors import Vec

COMPARISONS = frozenset({"==", "!=", ">", "<", ">=", "<="})

# The comparisons each window extreme may be filtered by, and whether the newest
# number equal to the bound already fails it.
_WINDOW_BOUNDS: dict[tuple[str, str], bool] = {
    ("max_over_time", "=="): False,
    ("max_over_time", "<="): False,
    ("max_over_time", "<"): True,
    ("min_over_time", "=="): False,
    ("min_over_time", ">="): False,
    ("min_over_time", ">"): True,
}

# Range functions that are exactly 0 (or nothing) over a window in which the
# counter did not change (``ranges.unchanged``).
RISES = frozenset({"rate", "increase"})

# The most groups put in their input order one by one (``first_rows``).
FEW_GROUPS = 4

# (aggregation, comparison) pairs whose filter may go before the grouping.
_EXTREME_FILTERS = frozenset({("max", ">"), ("max", ">="), ("min", "<"), ("min", "<=")})


def _against_number(b: Binary) -> bool:
    return isinstance(b.rhs, Num) and not b.return_bool and b.op in COMPARISONS


def filters_selection(b: Binary) -> Select | None:
    """The instant selector X of ``X <op> c`` (a comparison, no ``bool``), else
    None."""
    if _against_number(b) and isinstance(b.lhs, Select):
        return b.lhs
    return None


def zero_fails(b: Binary) -> bool:
    """Whether 0 fails the comparison ``b`` with a number (``<op> c``)."""
    assert isinstance(b.rhs, Num)
    return not bool(elementwise(b.op, np.zeros(1), b.rhs.value)[1][0])


def bounds_window(b: Binary) -> tuple[str, RangeSelect] | None:
    """(function, range selector) of ``max_over_time(X[r]) <= c`` and its kin
    (``_WINDOW_BOUNDS``), or of ``increase(X[r]) > c`` (``RISES``, any comparison
    that 0 fails), X a plain range selector (no ``@``), else None."""
    call = b.lhs
    if not (
        _against_number(b)
        and isinstance(call, Call)
        and ((call.name, b.op) in _WINDOW_BOUNDS or (call.name in RISES and zero_fails(b)))
        and len(call.args) == 1
    ):
        return None
    arg = call.args[0]
    if isinstance(arg, RangeSelect) and arg.select.at is None:
        return call.name, arg
    return None


def cannot_pass(
    fam: Family, rows: I64, function: str, op: str, c: float, mint: int, maxt: int
) -> Mask:
    """The ``rows`` whose window ``[mint, maxt]`` cannot give a ``function`` that
    passes ``<op> c`` (``bounds_window``): for ``max_over_time`` and
    ``min_over_time``, the newest sample at or before ``maxt`` is a number beyond
    the bound (NaN, a stale marker's value included, is beyond nothing); for a
    counter's rise (which 0 fails), the counter did not change."""
    if function in RISES:
        return unchanged(fam, rows, mint, maxt)
    idx = fam.search_rows(rows, maxt, True) - 1
    newest = fam.values_at(rows, np.maximum(idx, 0))
    judged = idx >= 0
    strict = _WINDOW_BOUNDS[(function, op)]
    with np.errstate(invalid="ignore"):
        if function == "max_over_time":
            beyond = newest >= c if strict else newest > c
        else:
            beyond = newest <= c if strict else newest < c
    out: Mask = judged & beyond
    return out


# A join narrows its right when its left has fewer samples than this share of
# the right's series: a join of every device to its pod (the rhythm learner's)
# computes the whole right, which other rules then share.
NARROW_SHARE = 8
# Aggregations whose groups the narrowing keeps whole (no parameter).
_GROUPINGS = frozenset({"sum", "min", "max", "avg", "count", "group"})


def narrows_join(b: Binary) -> tuple[Call, Aggregate | None] | None:
    """The range function on the right of ``A <op> on (labels) [group_left]
    f(X[r])`` (arithmetic or a comparison, one-to-one or many-to-one, on listed
    labels but ``__name__``; ``f`` read by ``Evaluator._range_call``: X a plain
    range selector, ``f`` not one of ``POINT_FUNCTIONS``), and the aggregation
    around it where the right is ``agg by (labels) (f(X[r]))``; else None."""
    if not (
        b.on
        and b.card in ("one-to-one", "many-to-one")
        and b.op not in ("and", "or", "unless")
        and "__name__" not in b.labels
    ):
        return None
    right: Plan = b.rhs
    agg: Aggregate | None = None
    if isinstance(right, Aggregate):
        if not (
            right.op in _GROUPINGS
            and right.param is None
            and not right.without
            and set(right.labels) == set(b.labels)
        ):
            return None
        agg = right
        right = right.expr
    if not (isinstance(right, Call) and len(right.args) == 1):
        return None
    arg = right.args[0]
    if (
        isinstance(arg, RangeSelect)
        and arg.select.at is None
        and right.name not in POINT_FUNCTIONS
        and right.name not in ("absent_over_time", "last_over_time")
    ):
        return right, agg
    return None


def narrows_set(b: Binary) -> Select | None:
    """The selector X of ``A and on (labels) X`` or ``A unless on (labels) X``, or
    of the same with ``X <op> c`` on the right (a comparison with a number, no
    ``bool``); else None. A set operator reads only the labels of its right, and
    only whether a sample of the left has them: the right's other series change
    nothing, and neither X nor its comparison can raise an error."""
    if not (b.on and b.op in ("and", "unless") and "__name__" not in b.labels):
        return None
    right = b.rhs
    if isinstance(right, Binary) and _against_number(right):
        right = right.lhs
    return right if isinstance(right, Select) else None


def join_keys(fam: Family, rows: I64, lhs: Vec, labels: tuple[str, ...]) -> tuple[I64, I64]:
    """The match keys (``on (labels)``) of the samples of ``lhs`` and of the
    ``rows`` of ``fam``, comparable with each other: ``binops.signatures`` over
    the rows' columns of those labels only, not a vector of all of them."""
    cols = {k: fam.codes[k][rows] for k in set(labels) if k in fam.codes}
    return signatures(lhs, Vec(cols, np.zeros(rows.size)), True, labels)


def shared_keys(keys: I64) -> Mask:
    """Which of ``keys`` occur more than once."""
    _, inverse, counts = np.unique(keys, return_inverse=True, return_counts=True)
    out: Mask = counts[inverse] > 1
    return out


def filters_extremes(b: Binary) -> bool:
    """A filter (no ``bool``) of a ``max`` by a lower bound, or of a ``min`` by an
    upper one, against a number literal; or of a ``sum`` by a lower bound that a
    sum of 0 fails (``> c`` with c >= 0, ``>= c`` with c > 0), whose zero samples
    are left out before grouping."""
    agg = b.lhs
    if not (
        isinstance(agg, Aggregate)
        and isinstance(b.rhs, Num)
        and not b.return_bool
        and agg.param is None
    ):
        return False
    if agg.op == "sum":
        c = b.rhs.value
        return (b.op == ">" and c >= 0) or (b.op == ">=" and c > 0)
    return (agg.op, b.op) in _EXTREME_FILTERS


def rising(b: Binary) -> tuple[str, RangeSelect] | None:
    """(function, range selector) of the rise that ``b`` groups and filters
    (``filters_extremes``) where its zero samples cannot pass: ``sum`` leaves them
    out, ``max`` and ``min`` where 0 fails the bound. X a plain range selector."""
    agg = b.lhs
    assert isinstance(agg, Aggregate)
    call = agg.expr
    if not (isinstance(call, Call) and call.name in RISES and len(call.args) == 1):
        return None
    arg = call.args[0]
    if not (isinstance(arg, RangeSelect) and arg.select.at is None):
        return None
    return (call.name, arg) if agg.op == "sum" or zero_fails(b) else None


def kept_extremes(b: Binary, values: F64) -> Mask:
    """Which samples ``Evaluator._filtered_extremes`` groups for ``b``: a sample of 0
    adds nothing to a ``sum`` (x + 0 is x), and a group of only such sums to 0,
    which its bound leaves out anyway; a maximum's or minimum's must pass."""
    assert isinstance(b.lhs, Aggregate) and isinstance(b.rhs, Num)
    if b.lhs.op == "sum":
        out: Mask = values != 0
        return out
    return elementwise(b.op, values, b.rhs.value)[1]


def first_rows(grouped: Vec, inner: Vec) -> I64:
    """For each group of ``grouped`` (an aggregation of some rows of ``inner``), the
    first row of ``inner`` with its grouping labels."""
    out = np.zeros(len(grouped), dtype=np.int64)
    for g in range(len(grouped)):
        same = np.ones(len(inner), dtype=np.bool_)
        for name, col in grouped.cols.items():
            same &= inner.cols[name] == col[g]
        out[g] = int(np.argmax(same))
    return out


__all__ = [
    "COMPARISONS",
    "FEW_GROUPS",
    "NARROW_SHARE",
    "bounds_window",
    "cannot_pass",
    "filters_extremes",
    "filters_selection",
    "first_rows",
    "join_keys",
    "kept_extremes",
    "narrows_join",
    "narrows_set",
    "rising",
    "shared_keys",
    "zero_fails",
]
