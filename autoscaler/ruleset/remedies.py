"""Reading the rule fields that make a ladder follow its fault's class:
``classLabel``, a step's ``classes`` and ``recurrence`` (docs/rules.md, "Ladders
that follow the fault's class").

Why apart from ``loader.py``: these fields are one feature with rules of their own
(a step's ``classes`` means nothing without the rule's ``classLabel``, a
recurrence cap needs a step that isolates), and the loader is long enough. The
checks here report at the YAML node, as the loader does, with the vocabulary a
mistyped class should have been (``accel_common.remedies.ACTION_CLASSES``).
"""

from __future__ import annotations

import re
from typing import Literal, cast

from yaml.nodes import Node

from accel_common.remedies import ACTION_CLASSES
from accel_common.yamlread import Entries, Reader
from autoscaler.promql.errors import ExprError
from autoscaler.promql.guard import parse
from autoscaler.ruleset.labels import missing_labels
from autoscaler.ruleset.model import Recurrence, Step

RECURRENCE_KEYS = ("max", "window", "per")
RECURRENCE_PER = ("target", "node")
# The most ladders a cap may allow in its window, and the longest window.
MAX_RECURRENCE = 100
MAX_WINDOW = 30 * 86_400.0
# A Prometheus label name.
_LABEL = re.compile(r"^[a-zA-Z_][a-zA-Z0-9_]*$")


def step_classes(reader: Reader, node: Node, i: int) -> frozenset[str]:
    """A step's ``classes:``: a non-empty list of fault classes."""
    what = f"escalate step {i}: classes"
    items = reader.sequence(node, what, "a list of fault classes")
    if not items:
        if items is not None:
            reader.problem(node, f"{what} lists no class (leave it out: every ladder takes it)")
        return frozenset()
    out: set[str] = set()
    for item in items:
        klass = reader.choice(item, f"{what} item", ACTION_CLASSES)
        if klass is not None:
            out.add(klass)
    return frozenset(out)


def class_label(reader: Reader, entries: Entries) -> str | None:
    """``classLabel:``: the label whose value is the fault's class."""
    if "classLabel" not in entries:
        return None
    node = entries["classLabel"][1]
    label = reader.string(node, "classLabel")
    if label is not None and not _LABEL.match(label):
        reader.problem(node, f"classLabel must be a label name (such as action), got {label!r}")
        return None
    return label


def recurrence(reader: Reader, node: Node) -> Recurrence | None:
    """``recurrence: {max, window, per}``."""
    entries = reader.mapping(node, "recurrence", RECURRENCE_KEYS, required=("max", "window"))
    if entries is None or "max" not in entries or "window" not in entries:
        return None
    most = reader.integer(entries["max"][1], "recurrence max", 1, maximum=MAX_RECURRENCE)
    window = reader.duration(
        entries["window"][1], "recurrence window", minimum=60.0, maximum=MAX_WINDOW
    )
    per = "target"
    if "per" in entries:
        per = reader.choice(entries["per"][1], "recurrence per", RECURRENCE_PER) or "target"
    if most is None or window is None:
        return None
    return Recurrence(most, window, cast(Literal["target", "node"], per))


def check(
    reader: Reader,
    node: Node,
    entries: Entries,
    steps: tuple[Step, ...],
    label: str | None,
    cap: Recurrence | None,
) -> None:
    """What the three fields need of each other and of the ladder."""
    # Each check needs the ladder read: a step with a problem of its own leaves the
    # ladder empty, and saying more about it would only repeat that problem.
    if label is not None and "escalate" not in entries:
        reader.problem(
            entries["classLabel"][0],
            "classLabel: only a ladder (escalate) follows a fault's class; this rule has "
            "one action",
        )
    classed = [(i, s) for i, s in enumerate(steps, 1) if s.classes]
    if classed and label is None:
        reader.problem(
            node,
            f"escalate step {classed[0][0]}: classes needs the rule's classLabel (the label "
            "whose value is the fault's class, such as classLabel: action)",
        )
    if steps and steps[0].classes:
        reader.problem(
            node,
            "escalate step 1: classes: the first step is the rule's act, which every ladder "
            "takes; name classes on the later steps",
        )
    if cap is not None and steps and not any("isolate" in s.classes for s in steps):
        reader.problem(
            entries["recurrence"][0],
            "recurrence: the cap sends a target to the isolate class, but no step of this "
            "ladder has classes: [isolate] (add a mark_for_return step for it)",
        )


def check_label(reader: Reader, entries: Entries, expr: str | None, label: str | None) -> None:
    """A ``classLabel`` the rule's ``expr`` can never carry gives every ladder the
    unknown class: a mistake worth saying (an aggregation that dropped it)."""
    if label is None or expr is None:
        return
    try:
        ast = parse(expr)
    except ExprError:
        return  # the expression's own problem is reported at it
    if missing_labels(ast, [label]):
        reader.problem(
            entries["classLabel"][1],
            f"classLabel: the expr can never carry the {label!r} label, so every ladder "
            f"would follow the unknown class; keep it in by (...) (max by (node, device, "
            f"{label}) (...))",
        )


__all__ = [
    "RECURRENCE_KEYS",
    "check",
    "check_label",
    "class_label",
    "recurrence",
    "step_classes",
]
