"""The points of some of a family's rows inside one range: what a range selector
reads from the built-in evaluator's store (``Family.window``) and the range
functions (``functions.py``, ``over_time.py``) compute on.

Why a module of its own: the shape is shared by the store that builds it and the
functions that read it, and is plain data; the storage that fills it stays in
``family.py``.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from autoscaler.promql.symbols import F64, I64, Mask


@dataclass
class Window:
    """The points of some of a family's rows inside one range, left-aligned.

    ``values`` is (rows x width); a row's points are its first ``count`` entries.
    ``valid`` is None when every row has ``width`` points.
    """

    rows: I64
    count: I64
    first_t: I64
    last_t: I64
    first_v: F64
    last_v: F64
    values: F64 | None = None
    valid: Mask | None = None
    timestamps: I64 | None = field(default=None, repr=False)
    parts: list[Window] | None = None
    """Instead of ``values``: uniform sub-windows (every row the same number of
    points, so no mask), with ``positions`` saying where their rows are in this one."""
    positions: I64 | None = None

    def part(self, positions: I64, values: F64) -> Window:
        """The sub-window of the rows at ``positions`` with their point matrix."""
        return Window(
            rows=self.rows[positions],
            count=self.count[positions],
            first_t=self.first_t[positions],
            last_t=self.last_t[positions],
            first_v=self.first_v[positions],
            last_v=self.last_v[positions],
            values=values,
            positions=positions,
        )


def joined(a: Window, at_a: I64, b: Window, at_b: I64) -> Window:
    """One window of two windows of a family's rows, whose positions among the
    rows asked for are ``at_a`` and ``at_b``: rows in the order asked for, each
    of the two a part (``Window.parts``)."""
    order = np.argsort(np.concatenate((at_a, at_b)), kind="stable")
    where = np.empty_like(order)
    where[order] = np.arange(order.size)
    w = Window(
        rows=np.concatenate((a.rows, b.rows))[order],
        count=np.concatenate((a.count, b.count))[order],
        first_t=np.concatenate((a.first_t, b.first_t))[order],
        last_t=np.concatenate((a.last_t, b.last_t))[order],
        first_v=np.concatenate((a.first_v, b.first_v))[order],
        last_v=np.concatenate((a.last_v, b.last_v))[order],
    )
    a.positions = where[: a.rows.size]
    b.positions = where[a.rows.size :]
    w.parts = [a, b]
    return w


__all__ = ["Window", "joined"]
