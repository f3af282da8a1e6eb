"""What the evaluator keeps between queries at one time: selections, range
functions and the results of subexpressions that several queries share, each kept
only while the metric families it read are unchanged.

Why a module of its own: a cycle asks many queries at one time, and they repeat
each other. The rhythm learner asks for every gang's largest utilization, and
``stalled-gang`` asks for it again; five rules join the pods' ages to their gangs
the same way. Before, anything kept was dropped at the store's next write, and
every cycle writes between its queries (the learner's rows go into the store
before the rules read them), so the rules paid again for what the learner had
just computed, over every device of the fleet.

How it stays exact:

- **Shared subexpressions are one object.** ``Interner`` makes structurally equal
  plan nodes the same object across every compiled expression (the plans are
  frozen dataclasses, equal by value), and marks the nodes met more than once.
  Only those (an aggregation, a binary operation or a call) have their results
  kept: a node that no other query repeats is never asked again at the same time.
- **A result is kept with what it read.** Each entry holds a stamp: for every
  metric name its selectors name exactly (``__name__="x"``), that family object and
  its ``version`` (``Family`` counts every change: a row added, samples appended or
  trimmed). An entry is used only while its stamp is the store's now, so a write
  to the rhythm series leaves the utilization's results in place and a new
  utilization sample drops them. A selector without an exact name reads every
  family: its stamp is the store's write count, which any write changes.
- **The rest clears everything**: the store's ``generation`` changes when series
  are dropped or renumbered (the retention), and the whole memo is dropped; so is
  it when it holds more than ``limit`` entries or its plans are recompiled.
- A plan node that reads the query's own time through ``@ start()`` or
  ``@ end()`` is never kept (its result depends on more than its time).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Hashable
from typing import Any

from autoscaler.promql.family import Family
from autoscaler.promql.matchers import MatchType
from autoscaler.promql.plans import (
    Aggregate,
    At,
    Binary,
    Call,
    Neg,
    Plan,
    RangeSelect,
    Select,
    Subquery,
)
from autoscaler.promql.store import SeriesStore

# Names a plan node reads: a tuple of exact metric names, or None (any family).
Names = tuple[str, ...] | None
Stamp = Hashable


class Interner:
    """Plan nodes made unique by value, and which of them are met more than once."""

    def __init__(self) -> None:
        self._nodes: dict[tuple[Any, ...], Plan] = {}
        self.shared: set[int] = set()
        self._names: dict[int, Names] = {}
        self._timeless: dict[int, bool] = {}

    def clear(self) -> None:
        self._nodes.clear()
        self.shared.clear()
        self._names.clear()
        self._timeless.clear()

    def intern(self, plan: Plan) -> Plan:
        """``plan`` with every node replaced by its one equal instance."""
        fields = [(f.name, getattr(plan, f.name)) for f in dataclasses.fields(plan)]
        children = [(name, value, self._child(value)) for name, value in fields]
        changes = {name: new for name, old, new in children if new is not old}
        if changes:
            plan = dataclasses.replace(plan, **changes)
        # Children are interned first, so equal children are one instance, kept
        # alive here: a node is known by its own fields and its children's ids,
        # and hashing it costs its own fields, not its whole subtree's.
        key = (type(plan), *(_shallow(new) for _, _, new in children))
        try:
            found = self._nodes.get(key)
        except TypeError:  # an unhashable field: kept as it is
            return plan
        if found is not None:
            self.shared.add(id(found))
            return found
        self._nodes[key] = plan
        return plan

    def _child(self, value: Any) -> Any:
        if isinstance(value, Neg | Select | RangeSelect | Subquery | Call | Aggregate | Binary):
            return self.intern(value)
        if isinstance(value, tuple) and value and all(_is_plan(v) for v in value):
            return tuple(self.intern(v) for v in value)
        return value

    def keeps(self, plan: Plan) -> bool:
        """Whether ``plan``'s results are worth keeping: a shared node that computes
        something, and reads nothing of the query's own time."""
        if id(plan) not in self.shared or not isinstance(plan, Aggregate | Binary | Call):
            return False
        timeless = self._timeless.get(id(plan))
        if timeless is None:
            timeless = self._timeless[id(plan)] = not any(
                isinstance(n, Select | Subquery) and n.at is not None and _edge(n.at)
                for n in _walk(plan)
            )
        return timeless

    def names(self, plan: Plan) -> Names:
        """The exact metric names ``plan`` reads; None when a selector has none."""
        key = id(plan)
        if key in self._names:
            return self._names[key]
        found: set[str] = set()
        out: Names = None
        for node in _walk(plan):
            if isinstance(node, Select):
                name = select_name(node)
                if name is None:
                    break
                found.add(name)
        else:
            out = tuple(sorted(found))
        self._names[key] = out
        return out


class Memo:
    """Entries by key, each valid while the families it read are unchanged."""

    def __init__(self, store: SeriesStore, limit: int) -> None:
        self.store = store
        self.limit = limit
        self._entries: dict[Hashable, tuple[Stamp, Any]] = {}
        self._generation = store.generation

    def clear(self) -> None:
        self._entries.clear()
        self._generation = self.store.generation

    def check(self) -> None:
        """Drops everything when the store was renumbered, or the memo is full."""
        if self._generation != self.store.generation or len(self._entries) > self.limit:
            self.clear()

    def stamp(self, names: Names) -> Stamp:
        if names is None:
            return ("writes", self.store.writes)
        families = self.store.families
        return tuple(_version(families.get(n)) for n in names)

    def get(self, key: Hashable, names: Names) -> Any:
        entry = self._entries.get(key)
        if entry is None or entry[0] != self.stamp(names):
            return None
        return entry[1]

    def put(self, key: Hashable, names: Names, value: Any) -> None:
        self._entries[key] = (self.stamp(names), value)


def select_name(sel: Select) -> str | None:
    """The metric name ``sel`` matches exactly, if it has one."""
    for m in sel.matchers:
        if m.name == "__name__" and m.type is MatchType.EQ:
            return m.value
    return None


def _version(fam: Family | None) -> tuple[int, int] | None:
    return None if fam is None else (id(fam), fam.version)


def _edge(at: At) -> bool:
    return at.edge is not None


_NODE = object()  # marks a child node's id in an interned node's key


def _shallow(value: Any) -> Any:
    """A field of an interned node as its key holds it: a child node (or a tuple
    of them) by identity, anything else by value."""
    if _is_plan(value):
        return (_NODE, id(value))
    if isinstance(value, tuple) and value and all(_is_plan(v) for v in value):
        return (_NODE, *map(id, value))
    return value


def _is_plan(value: object) -> bool:
    return isinstance(value, Neg | Select | RangeSelect | Subquery | Call | Aggregate | Binary)


def _walk(plan: Plan) -> list[Plan]:
    out: list[Plan] = []
    stack: list[Any] = [plan]
    while stack:
        node = stack.pop()
        if _is_plan(node):
            out.append(node)
            stack.extend(getattr(node, f.name) for f in dataclasses.fields(node))
        elif isinstance(node, tuple):
            stack.extend(node)
    return out


__all__ = ["Interner", "Memo", "Names", "select_name"]
