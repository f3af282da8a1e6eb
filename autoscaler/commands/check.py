"""``accel-autoscaler check``: validate rule files; every problem as
``file:line:col: message`` on stderr and exit 1, or a one-line summary and 0.
A file that cannot be used at all (unreadable, not UTF-8, not YAML, over the
reader's limits) is a problem like any other, at its position, and exit 1; exit
2 is for the command line and for a failure of the checker itself, which is
reported in one line, never as a traceback.

With ``--source scrape`` it also refuses the PromQL that the built-in evaluator
cannot run, so that a rule set meant for the scrape source fails here and not in
a running controller.

A rule set that loads can still surprise: a rule acts once per *incident*
(``engine/evaluate.py``), and what ends one, or undoes what the rule did, is easy
to misjudge from the YAML. ``--verbose`` says, per rule, when it acts and when it
may act again. A destructive action (one that a ``recover`` could undo: cordon,
taint, drain, migrate_jobs) without ``recover`` stays until a person undoes it;
that is worth a warning on stderr whether or not ``--verbose`` is given, but it is
not an error (exit 0): some teams want a person in that loop.

Escalation ladders (``escalate:``) are validated by the loader like any rule: each
step's action by its own spec (parameters, and whether it acts on the rule's
target), a ``timeout`` on every step but the last, each ``recover`` as a rule's
(PromQL, target labels, known metrics), an unknown action with a did-you-mean.
``--verbose`` adds the ladder to the rule's sentence: each step, what ends it,
and when the next one starts.

Fault classes (``commands/classes.py``): ``--verbose`` says which classes of
``accel_fault_events_total{action}`` each rule acts on, and for a ladder with
``classLabel`` which steps each class takes; a class that no rule acts on is a
warning on stderr (``ignore`` aside), when the rule set reads fault events at all.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence
from pathlib import Path

from autoscaler.actions import ACTIONS
from autoscaler.commands import classes
from autoscaler.engine.evaluate import format_duration
from autoscaler.ruleset.loader import RuleSetError, load_ruleset
from autoscaler.ruleset.model import TARGET_LABELS, Rule

# How much of a rule's expression a verbose line quotes; the file has the rest.
_EXPR_WIDTH = 60


def add_arguments(c: argparse.ArgumentParser) -> None:
    c.add_argument("paths", nargs="+", metavar="PATH", help="rule files or directories")
    c.add_argument(
        "--source",
        choices=("prometheus", "scrape"),
        default="prometheus",
        help="also refuse PromQL the built-in evaluator cannot run (scrape) (default %(default)s)",
    )
    c.add_argument(
        "-v",
        "--verbose",
        action="store_true",
        help="explain, for each rule, when it acts and when it may act again (its incidents)",
    )


def main(args: argparse.Namespace) -> int:
    return check(args.paths, source=args.source, verbose=args.verbose)


def check(paths: Sequence[str | Path], source: str = "prometheus", verbose: bool = False) -> int:
    try:
        ruleset = load_ruleset(paths, source=source)
    except RuleSetError as e:
        for problem in e.problems:
            print(problem, file=sys.stderr)
        return 1
    except Exception as e:  # a bug in the checker must not be a traceback
        where = ", ".join(str(p) for p in paths)
        print(
            f"{where}: cannot check these rules: {type(e).__name__}: {e} (this is a bug in "
            "accel-autoscaler: please report it with the file)",
            file=sys.stderr,
        )
        return 2
    for rule in ruleset.rules:
        if verbose:
            print(f"{rule.position}: {rule.name}: {incident_boundary(rule)}")
            covers = classes.explain(rule)
            if covers is not None:
                print(f"{rule.position}: {rule.name}: {covers}")
        warning = destructive_without_recover(rule)
        if warning is not None:
            print(f"{rule.position}: warning: {rule.name}: {warning}", file=sys.stderr)
    for klass in classes.uncovered(ruleset):
        print(
            f"{', '.join(str(p) for p in paths)}: warning: no rule acts on fault class "
            f'{klass} (accel_fault_events_total{{action="{klass}"}}): such faults are '
            "exported and left alone (select it in a rule's expr, or a ladder step's classes)",
            file=sys.stderr,
        )
    n = len(ruleset.rules)
    where = ", ".join(str(p) for p in paths)
    print(f"{where}: {n} rule{'' if n == 1 else 's'} OK")
    return 0


def without_comments(expr: str) -> str:
    """``expr`` without its PromQL comments (``#`` to the end of the line, outside
    string literals, whose quotes and backslash escapes are honoured)."""
    out: list[str] = []
    quote = ""
    i = 0
    while i < len(expr):
        ch = expr[i]
        if quote:
            if ch == "\\" and quote != "`":
                out.append(expr[i : i + 2])
                i += 2
                continue
            quote = "" if ch == quote else quote
        elif ch in "\"'`":
            quote = ch
        elif ch == "#":
            end = expr.find("\n", i)
            if end < 0:
                break
            i = end
            continue
        out.append(ch)
        i += 1
    return "".join(out)


def incident_boundary(rule: Rule) -> str:
    """One sentence: what starts an incident of the rule, what ends it, and how far
    apart two acts on one target can be."""
    names = ", ".join(TARGET_LABELS[rule.target])
    target = f"a {rule.target} ({names})"
    waits = f" and has held for {format_duration(rule.for_)}" if rule.for_ else ""
    if rule.alertname is not None:
        starts = f"acts once per {rule.alertname} alert firing for {target}{waits}"
        ends = (
            "a new incident is a new alert (another fingerprint or startsAt) after this "
            "one resolves"
        )
    else:
        # PromQL comments are not the condition: a rule that explains its
        # expression in comments was described by its first comment.
        expr = " ".join(without_comments(rule.expr or "").split())
        if len(expr) > _EXPR_WIDTH:
            expr = expr[: _EXPR_WIDTH - 3] + "..."
        starts = f"acts once when `{expr}` starts holding for {target}{waits}"
        ends = "a new incident after it stops holding for one evaluation"
    if rule.recover is not None:
        ends += (
            f" (or its recover holds for {format_duration(rule.recover.for_)}, which "
            f"undoes the {rule.action.type}, and then the condition must stop holding first)"
        )
    gap = (
        f"at least {format_duration(rule.cooldown)} after the last act"
        if rule.cooldown
        else "with no cooldown"
    )
    repeat = (
        f"; while one incident lasts it acts again every {format_duration(rule.repeat)}"
        if rule.repeat
        else ""
    )
    return f"{starts}; {ends}, {gap}{repeat}{ladder(rule)}"


def ladder(rule: Rule) -> str:
    """The ladder in words, or nothing for a rule without one."""
    if not rule.escalate:
        return ""
    steps = []
    for i, step in enumerate(rule.escalate, 1):
        success = rule.success(i)
        words = f"{i}. {step.action.type}"
        if step.classes:
            words += f" [{', '.join(sorted(step.classes))}]"
        if "isolate" in step.classes:
            words += " (never recovered: the ladder ends once it is done)"
        elif success is not None:
            words += f" (done when its recover holds for {format_duration(success.for_)})"
        if step.timeout is not None:
            last = i == len(rule.escalate)
            words += (
                f", released after {format_duration(step.timeout)}"
                if last
                else f", next after {format_duration(step.timeout)} or when it fails"
            )
        steps.append(words)
    return "; it escalates: " + "; ".join(steps)


def destructive_without_recover(rule: Rule) -> str | None:
    """Why a rule deserves a warning, or None."""
    spec = ACTIONS.get(rule.action.type)
    if spec is None or not spec.reversible or rule.recover is not None:
        return None
    if any(s.recover is not None for s in rule.escalate):
        return None
    return (
        f"{rule.action.type} is destructive and the rule has no recover: what it does "
        "stays until a person undoes it (add recover to undo it when the target is well)"
    )
