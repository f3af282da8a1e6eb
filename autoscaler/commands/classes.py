"""Which fault classes a rule set acts on, for ``accel-autoscaler check``.

The exporter grades every fault into a class (``accel_common.remedies``: app,
watch, reset_when_idle, reset, reboot, isolate, ignore) and publishes it as the
``action`` label of ``accel_fault_events_total``. A class that no rule selects is
a class of faults that are exported and then left alone: a remap failure that
stays in service, an application fault that counts as a device storm. That is
easy to miss in YAML and plain to see in a list, so ``check`` says, per rule,
which classes it acts on (``--verbose``) and warns when a class has no rule.

How a rule covers a class, read from its ``expr`` (not its recover): a selector of
``accel_fault_events_total`` with ``action`` matchers that accept the class's name.
A selector without one selects by something else (a severity, as the stall rules
do to stay out of a fault's way) and covers no class by name; ``action=""``
(events of an exporter without classes) covers none either. A rule
with ``classLabel`` also says which steps of its ladder a class takes
(``Rule.takes``). An ``alertname`` rule reads no expression and covers nothing
here. ``ignore`` needs no rule and is never warned about.
"""

from __future__ import annotations

import promql_parser as pp

from accel_common.remedies import ACTION_CLASSES
from autoscaler.promql.guard import parse, vector_selectors
from autoscaler.promql.matchers import Matcher
from autoscaler.ruleset.model import Rule, RuleSet

FAULT_METRIC = "accel_fault_events_total"
CLASS_LABEL = "action"
# Classes that need no rule: nothing is to be done about them.
NEEDS_NO_RULE = frozenset({"ignore"})


def _selectors(expr: str) -> list[list[Matcher]]:
    """The matchers of every selector of the fault-event metric in ``expr``."""
    out: list[list[Matcher]] = []
    for e in vector_selectors(parse(expr)):
        names = {e.name} | {
            m.value
            for m in e.matchers.matchers
            if m.name == "__name__" and m.op == pp.MatchOp.Equal
        }
        if FAULT_METRIC in names:
            out.append([Matcher.from_parser(m) for m in e.matchers.matchers])
    return out


def covered(rule: Rule) -> dict[str, str]:
    """Class -> how the rule acts on it (its action, or the ladder steps the class
    takes), for every class some fault-event selector of its ``expr`` accepts."""
    if rule.expr is None:
        return {}
    selectors = _selectors(rule.expr)
    out: dict[str, str] = {}
    for klass in ACTION_CLASSES:
        accepted = any(
            any(m.name == CLASS_LABEL for m in sel)
            and all(m.matches(klass) for m in sel if m.name == CLASS_LABEL)
            for sel in selectors
        )
        if not accepted:
            continue
        if rule.escalate and rule.class_label is not None:
            steps = [i for i in range(1, len(rule.escalate) + 1) if rule.takes(i, klass)]
            types = ", ".join(f"{i}. {rule.escalate[i - 1].action.type}" for i in steps)
            out[klass] = f"steps {types}"
        elif rule.escalate:
            out[klass] = "every step"
        else:
            out[klass] = rule.action.type
    return out


def explain(rule: Rule) -> str | None:
    """The rule's classes in words, or None when it reads no fault event."""
    classes = covered(rule)
    if not classes:
        return None
    return "fault classes: " + "; ".join(f"{c} ({how})" for c, how in classes.items())


def uncovered(ruleset: RuleSet) -> list[str]:
    """The classes no rule acts on, when the rule set reads fault events at all
    (a rule set about something else is not expected to cover them)."""
    reads = False
    seen: set[str] = set()
    for rule in ruleset.rules:
        if rule.expr is not None and _selectors(rule.expr):
            reads = True
            seen |= set(covered(rule))
    if not reads:
        return []
    return [c for c in ACTION_CLASSES if c not in seen and c not in NEEDS_NO_RULE]


__all__ = ["covered", "explain", "uncovered"]
