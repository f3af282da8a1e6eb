"""The rhythm learner's jobs held as arrays (``rhythm.py``), one slot per job, and
the answers it reads them from, one row per job.

Why a table: at 2,048 one-node jobs (``scenarios/llama3-single.yaml``) a learner
that stepped every job in Python and wrote its ten figures one by one cost four
times what the stall rules it serves did. In most cycles nearly every job is busy
and steady: its step only moves its clocks (seen, last busy), and its figures
only those. The table does that for all such jobs at once; a job in a dip, ending
one, restarted, with a pause to forget, or new goes through the learner's
per-job step, which reads and writes its slot (``Rhythm._load``/``_save``).

What a slot holds: the clocks and flags the fast path moves or reads (``FLOATS``,
``busy_seen``, ``ending``, the oldest pause's start), the figures of the job's
recovered pauses (``PAUSE_FIGURES``: they change only in a per-job step) and the
store handles of its ten series. NaN is "none" in every float column: no figure
the learner publishes is NaN (the inputs it keeps are finite).

Why ``Answer``: a query's result read as label code columns (``ColumnarSource``)
is mapped to slots without a ``Sample`` or a key built per row, and the mapping of
one answer's rows is kept while the same rows come back and no job was made or
forgotten (``Rhythm.slots``); a source that only answers ``Vector``s (Prometheus)
gives the same rows as keys.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from autoscaler.promql.symbols import F64, I64, Mask, Symbols

# (kind "gang" | "pod", namespace, name)
JobKey = tuple[str, str, str]

# The float columns of a slot.
FLOATS = ("seen", "born", "since", "last_busy", "io", "idle_since")
# The figures of a job's recovered pauses, in this order: how many, the longest,
# the spacing, the last one's start and end, and the least its nodes moved.
PAUSE_FIGURES = 6
# The figures a job publishes (``metrics._RHYTHM``'s order).
FIGURES = 10


class Table:
    """The slots' columns; ``grow`` makes room, keeping what is there."""

    def __init__(self) -> None:
        self.size = 0
        self.floats: dict[str, F64] = {name: np.zeros(0) for name in FLOATS}
        self.busy_seen: Mask = np.zeros(0, dtype=np.bool_)
        self.ending: Mask = np.zeros(0, dtype=np.bool_)
        self.alive: Mask = np.zeros(0, dtype=np.bool_)
        # The oldest remembered pause's start (+inf: none).
        self.oldest: F64 = np.zeros(0)
        self.pauses: F64 = np.zeros((0, PAUSE_FIGURES))
        # Store handles of the ten series (-1: none held).
        self.handles: I64 = np.zeros((0, FIGURES), dtype=np.int64)

    def grow(self, size: int) -> None:
        if size <= self.size:
            return
        more = size - self.size
        for name, col in self.floats.items():
            self.floats[name] = np.concatenate([col, np.full(more, np.nan)])
        self.busy_seen = np.concatenate([self.busy_seen, np.zeros(more, dtype=np.bool_)])
        self.ending = np.concatenate([self.ending, np.zeros(more, dtype=np.bool_)])
        self.alive = np.concatenate([self.alive, np.zeros(more, dtype=np.bool_)])
        self.oldest = np.concatenate([self.oldest, np.full(more, np.inf)])
        self.pauses = np.concatenate([self.pauses, np.full((more, PAUSE_FIGURES), np.nan)])
        self.handles = np.concatenate([self.handles, np.full((more, FIGURES), -1, dtype=np.int64)])
        self.size = size

    def clear(self, slot: int) -> None:
        """A slot as a new job's: no clock, flag, pause or handle."""
        for col in self.floats.values():
            col[slot] = np.nan
        self.busy_seen[slot] = self.ending[slot] = False
        self.oldest[slot] = np.inf
        self.pauses[slot] = np.nan
        self.pauses[slot, 0] = 0.0
        self.handles[slot] = -1

    def figures(self, slots: I64) -> F64:
        """The published figures of ``slots``, one row each (NaN: no series)."""
        f = self.floats
        p = self.pauses[slots]
        idle = f["idle_since"][slots]
        return np.column_stack(
            [
                p[:, :5],
                idle,
                f["seen"][slots] - f["since"][slots],
                f["last_busy"][slots],
                np.where(np.isnan(idle), np.nan, f["io"][slots]),
                p[:, 5],
            ]
        )


@dataclass(frozen=True)
class Answer:
    """One query's rows, at most one per job of ``kind``: their keys (``keys``),
    or the code columns of namespace and name they are found by (``codes``, with
    the ``symbols`` that decode them), and their values."""

    kind: str
    values: F64
    keys: list[JobKey] | None = None
    codes: tuple[I64, I64] | None = None
    symbols: Symbols | None = None

    @staticmethod
    def of(kind: str, found: dict[JobKey, float]) -> Answer:
        return Answer(kind, np.array(list(found.values()), dtype=np.float64), keys=list(found))

    def __len__(self) -> int:
        return len(self.values)

    def with_values(self, values: F64) -> Answer:
        return Answer(self.kind, values, self.keys, self.codes, self.symbols)

    def valid(self) -> Mask:
        """Rows that name a job (a namespace and a name)."""
        if self.codes is None:
            return np.ones(len(self), dtype=np.bool_)
        namespace, name = self.codes
        ok: Mask = (namespace > 0) & (name > 0)
        return ok

    def key(self, row: int) -> JobKey:
        if self.keys is not None:
            return self.keys[row]
        assert self.codes is not None and self.symbols is not None
        namespace, name = self.codes
        string = self.symbols.string
        return (self.kind, string(int(namespace[row])), string(int(name[row])))

    def all_keys(self) -> list[JobKey]:
        if self.keys is not None:
            return self.keys
        assert self.codes is not None and self.symbols is not None
        namespace, name = (self.symbols.decode(c) for c in self.codes)
        kind = self.kind
        return [(kind, ns, n) for ns, n in zip(namespace, name, strict=True)]


@dataclass
class Mapped:
    """An answer's rows mapped to slots, kept while they and the jobs stay."""

    kind: str
    symbols: Symbols
    codes: tuple[I64, I64]
    generation: int
    slots: I64

    def fits(self, answer: Answer, generation: int) -> bool:
        codes = answer.codes
        return (
            codes is not None
            and self.generation == generation
            and self.kind == answer.kind
            and self.symbols is answer.symbols
            and all(np.array_equal(a, b) for a, b in zip(self.codes, codes, strict=True))
        )


__all__ = ["FIGURES", "FLOATS", "PAUSE_FIGURES", "Answer", "JobKey", "Mapped", "Table"]
