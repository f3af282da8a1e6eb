"""What a ``SeriesStore`` holds, read back for tests that compare stores."""

from __future__ import annotations

import math

import numpy as np

from autoscaler.promql.errors import EvalError, ExprError
from autoscaler.promql.evaluator import Evaluator
from autoscaler.promql.family import Family
from autoscaler.promql.store import SeriesStore
from autoscaler.promql.timelines import PAD
from autoscaler.types import Vector

Stored = dict[tuple[str, tuple[tuple[str, str], ...]], float]


def stored(store: SeriesStore, t: float) -> Stored:
    """Every series' value at ``t`` (5 minutes' lookback; none for a series whose
    latest sample is a stale marker), by name and labels."""
    out: Stored = {}
    for fam in store.families.values():
        rows, values = fam.instant(np.arange(fam.n), round(t * 1000), 300_000)
        for row, v in zip(rows.tolist(), values.tolist(), strict=True):
            labels = tuple(sorted((k, x) for k, x in fam.labels[row] if k != "__name__"))
            out[(fam.name, labels)] = v
    return out


Answer = list[tuple[object, float]]


def answer(result: object) -> Answer:
    """An instant vector's samples as (labels, value), in its order."""
    assert isinstance(result, Vector), result
    return [(s.labels, s.value) for s in result.samples]


def answer_or_error(store: SeriesStore, expr: str, t: float) -> Answer | str:
    """``expr``'s answer at ``t`` from a fresh evaluator over ``store``, or the
    evaluation error as its type and message."""
    try:
        return answer(Evaluator(store).instant(expr, t))
    except (EvalError, ExprError) as e:
        return f"{type(e).__name__}: {e}"


def same_answer_or_error(got: Answer | str, want: Answer | str) -> bool:
    """``same_answer``, or the same error."""
    if isinstance(got, str) or isinstance(want, str):
        return got == want
    return same_answer(got, want)


def same_answer(a: Answer, b: Answer) -> bool:
    """The same samples in the same order, NaN equal to NaN."""
    return len(a) == len(b) and all(
        la == lb and (va == vb or (math.isnan(va) and math.isnan(vb)))
        for (la, va), (lb, vb) in zip(a, b, strict=True)
    )


def assert_timelines(fam: Family) -> None:
    """A family's timelines hold what ``timelines.py`` promises: every row with
    samples at its timeline's head, each timeline's rows counted, its slots in
    use strictly increasing and padding after them, and one no row is on
    empty."""
    lines = fam.lines
    n = fam.n
    held = fam.count[:n] > 0
    on = np.bincount(fam.tl[:n][held], minlength=lines.width)
    assert on.tolist() == lines.members.tolist()
    rows = np.flatnonzero(held)
    ends = fam.toff[rows] + fam.count[rows]
    assert (ends == lines.length[fam.tl[rows]]).all()
    assert (lines.length[lines.members == 0] == 0).all()
    for line in range(lines.width):
        used = lines.times[: lines.length[line], line]
        assert (np.diff(used) > 0).all(), line
        assert (lines.times[lines.length[line] :, line] == PAD).all(), line
