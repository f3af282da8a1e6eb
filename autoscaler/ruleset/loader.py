"""Load rule files into a ``RuleSet``, reporting every problem as ``file:line:col``.

Rules are written by people and read by a controller that evicts pods on their
say-so, so the loader is strict and talkative: an unknown key is a typo until
proved otherwise, a target the expression can never name is a rule that will never
fire, and PromQL the built-in evaluator cannot run would fail silently at 3 a.m.
Each of these is a ``Problem`` with the position of the offending YAML node; the
loader walks the whole input, keeps going after each one, and raises a single
``RuleSetError`` with all of them at the end (``accel-autoscaler check`` prints
them; the controller refuses to start, or keeps its last good rules on reload).

The YAML is read with ``accel_common.yamlread``, the reader every file format here
shares: it keeps the line and column of every key and value, and words the
generic problems (unknown keys, wrong types, durations) the same everywhere.

Every number has bounds (``_BOUNDS``): an evaluation interval from 1s to 1h, and
durations and counts no operator needs beyond, so that a typo such as ``for:
5000d`` or a 5,000-digit count is a problem at its position, not a rule that
never fires or a controller asleep for an hour. The reader's own limits (size,
depth, aliases, UTF-8) come first. A PromQL syntax error is reported at the bad
token's line and column inside the file (``exprpos``), and every expression goes
to the parser library only through ``promql/guard.py``, which refuses what would
crash it.

Several files merge into one rule set: rules are concatenated (names are unique
across all of them), and ``evaluationInterval`` and each ``limits`` key may be set
in more than one file only if every file agrees.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, cast

import promql_parser as pp
from yaml.nodes import Node

from accel_common.suggest import did_you_mean
from accel_common.yamlread import Entries, Reader
from autoscaler import clusterstate
from autoscaler.actions import ACTIONS
from autoscaler.promql.errors import ExprError
from autoscaler.promql.guard import parse, vector_selectors
from autoscaler.ruleset import remedies
from autoscaler.ruleset.errors import Problem, RuleSetError, whole_file
from autoscaler.ruleset.exprpos import BUDGET, error_offset, token_at
from autoscaler.ruleset.files import rule_files
from autoscaler.ruleset.labels import missing_labels, value_type
from autoscaler.ruleset.model import (
    TARGET_LABELS,
    TARGETS,
    Action,
    Limits,
    Position,
    Recover,
    Rule,
    RuleLimits,
    RuleSet,
    Step,
    Target,
)
from exporter import schema

API_VERSION = "accel-fleet/v1"
KIND = "RuleSet"
SOURCES = ("prometheus", "scrape")

TOP_KEYS = ("apiVersion", "kind", "spec")
SPEC_KEYS = ("evaluationInterval", "limits", "rules")
LIMITS_KEYS = (
    "maxUnhealthyNodes",
    "maxConcurrentDrains",
    "maxActionsPerHour",
    "breakerReset",
    "breakerWindow",
    "scaleUpGrace",
)
RULE_KEYS = (
    "name",
    "description",
    "expr",
    "alertname",
    "for",
    "target",
    "action",
    "escalate",
    "cooldown",
    "repeat",
    "limits",
    "recover",
    "classLabel",
    "recurrence",
)
RULE_LIMITS_KEYS = ("maxConcurrent", "maxActionsPerHour")
RECOVER_KEYS = ("expr", "for")
STEP_KEYS = ("action", "timeout", "recover", "classes")
# The most steps a ladder may have: more rungs than any remediation has.
MAX_STEPS = 10
BREAKER_RESETS = ("manual", "window")

# A rule name appears in decision logs, metrics labels and Kubernetes annotations:
# keep it to a DNS label.
_RULE_NAME = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$")
_PERCENT = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*%\s*$")

# Metric names a rule may read: the exporter's and the controller's catalogues. A
# name in our own ``accel_`` namespace that is in neither is a typo; other names
# (kube-state-metrics, DCGM, recording rules) are Prometheus's business.
KNOWN_METRICS: frozenset[str] = frozenset(schema.BY_NAME) | frozenset(
    m.name for m in clusterstate.CATALOGUE
)
_OWN_PREFIX = "accel_"
# Seconds: the bounds of each duration field (minimum, maximum). An interval over
# an hour would leave the controller deaf for that long after a mistake; the
# others are longer than any incident, window or grace period needs.
_HOUR, _DAY = 3600.0, 86_400.0
_BOUNDS: dict[str, tuple[float, float]] = {
    "evaluationInterval": (1.0, _HOUR),
    "for": (0.0, 7 * _DAY),
    "cooldown": (0.0, 30 * _DAY),
    "repeat": (0.0, 30 * _DAY),
    "breakerWindow": (1.0, 7 * _DAY),
    "scaleUpGrace": (0.0, _DAY),
    "timeout": (1.0, 7 * _DAY),
}
# The largest count each integer field accepts: more nodes than a cluster has,
# more actions than an hour can hold.
_MAX_COUNT: dict[str, int] = {
    "maxUnhealthyNodes": 100_000,
    "maxConcurrentDrains": 10_000,
    "maxConcurrent": 10_000,
    "maxActionsPerHour": 100_000,
}
# Syntax errors located by probing the parser, per file; after these, those that
# need probes are reported at the expression (a file of broken expressions should
# not cost seconds).
_LOCATED_PER_FILE = 3
# The controller's own telemetry, which no catalogue above lists.
_SELF_PREFIX = "accel_autoscaler_"


def load_ruleset(paths: Sequence[str | Path], *, source: str = "prometheus") -> RuleSet:
    """Loads and validates rule files and directories into one ``RuleSet``.

    ``source`` is where the controller will evaluate the rules; with ``scrape`` the
    built-in evaluator runs them, and PromQL outside its subset is a problem too.
    Raises ``RuleSetError`` listing every problem.
    """
    if source not in SOURCES:
        raise ValueError(f"unknown source {source!r} (use {' or '.join(SOURCES)})")
    files, problems = rule_files(paths)
    if not files and not problems:
        problems.append(Problem(whole_file("<none>"), "no rule files given"))
    parsed = [_FileReader(f, source).read() for f in files]
    merged = _merge(parsed, problems)
    if problems:
        raise RuleSetError(problems)
    return merged


# --- one file ---------------------------------------------------------------------


@dataclass
class _Setting:
    """A spec-level value from one file, for the merge: normalized value, the text
    as written, and where."""

    value: Any
    text: str
    position: Position


@dataclass
class _ParsedFile:
    file: str
    problems: list[Problem] = field(default_factory=list)
    evaluation_interval: _Setting | None = None
    limits: dict[str, _Setting] = field(default_factory=dict)
    rules: list[Rule] = field(default_factory=list)
    # Every rule name written, with its position, valid rule or not.
    names: list[tuple[str, Position]] = field(default_factory=list)


class _FileReader(Reader):
    """Reads one file's node tree, recording problems as it goes."""

    def __init__(self, file: str, source: str) -> None:
        super().__init__(file)
        self.source = source
        self.out = _ParsedFile(file, self.problems)
        self.located_errors = 0

    def read(self) -> _ParsedFile:
        root = self.load(
            empty=f"empty file: expected apiVersion: {API_VERSION}, kind: {KIND} and a spec"
        )
        if root is not None:
            self.top(root)
        return self.out

    def top(self, root: Node) -> None:
        entries = self.mapping(root, "a rule file", TOP_KEYS, required=TOP_KEYS)
        if entries is None:
            return
        for key, expected in (("apiVersion", API_VERSION), ("kind", KIND)):
            if key in entries:
                node = entries[key][1]
                ok, got = self.construct(node)
                if ok and got != expected:
                    self.problem(node, f"{key} must be {expected!r}, got {got!r}")
        if "spec" in entries:
            self.spec(entries["spec"][1])

    def spec(self, node: Node) -> None:
        entries = self.mapping(node, "spec", SPEC_KEYS)
        if entries is None:
            return
        if "evaluationInterval" in entries:
            v = entries["evaluationInterval"][1]
            seconds = self.bounded_duration(v, "evaluationInterval")
            if seconds is not None:
                self.out.evaluation_interval = _Setting(seconds, self.text(v), self.pos(v))
        if "limits" in entries:
            self.limits(entries["limits"][1])
        if "rules" in entries:
            for item in self.sequence(entries["rules"][1], "rules", "a list of rules") or []:
                rule = self.rule(item)
                if rule is not None:
                    self.out.rules.append(rule)

    def limits(self, node: Node) -> None:
        entries = self.mapping(node, "limits", LIMITS_KEYS)
        if entries is None:
            return
        for key, (_, v) in entries.items():
            value: Any = None
            if key == "maxUnhealthyNodes":
                value = self.unhealthy(v)
            elif key in ("maxConcurrentDrains", "maxActionsPerHour"):
                value = self.integer(v, key, maximum=_MAX_COUNT[key])
            elif key == "breakerReset":
                value = self.choice(v, key, BREAKER_RESETS)
            elif key in ("breakerWindow", "scaleUpGrace"):
                value = self.bounded_duration(v, key)
            if value is not None:
                self.out.limits[key] = _Setting(value, self.text(v), self.pos(v))

    def unhealthy(self, node: Node) -> tuple[str, float] | None:
        """maxUnhealthyNodes: a whole number of nodes, or a percentage of them."""
        ok, value = self.construct(node)
        if not ok:
            return None
        most = _MAX_COUNT["maxUnhealthyNodes"]
        if isinstance(value, int) and not isinstance(value, bool):
            if 0 <= value <= most:
                return ("count", float(value))
        elif isinstance(value, str):
            digits = value.strip()
            if digits.isdigit() and len(digits) <= len(str(most)) and int(digits) <= most:
                return ("count", float(digits))
            m = _PERCENT.match(value) if len(value) <= 32 else None
            if m and 0.0 <= float(m.group(1)) <= 100.0:
                return ("ratio", float(m.group(1)) / 100.0)
        self.problem(
            node,
            f"maxUnhealthyNodes must be a whole number of nodes from 0 to {most} or a "
            f'percentage from 0% to 100% (e.g. 3 or "10%"), got {self.describe(node)}',
        )
        return None

    # a rule

    def rule(self, node: Node) -> Rule | None:
        before = len(self.out.problems)
        entries = self.mapping(node, "a rule", RULE_KEYS, required=("name", "target"))
        if entries is None:
            return None
        name = self.rule_name(entries)
        description = ""
        if "description" in entries:
            description = self.string(entries["description"][1], "description", empty=True) or ""
        target: str | None = None
        if "target" in entries:
            target = self.choice(entries["target"][1], "target", TARGETS)
        expr, alertname = self.condition(node, entries, target)
        for_ = self.optional_duration(entries, "for")
        cooldown = self.optional_duration(entries, "cooldown")
        repeat = self.optional_duration(entries, "repeat")
        action, steps = self.remedy(node, entries, target)
        rule_limits = self.rule_limits(entries["limits"][1]) if "limits" in entries else None
        recover = self.rule_recover(entries, action, target) if "recover" in entries else None
        self.check_repeat(entries, action, repeat)
        label = remedies.class_label(self, entries)
        cap = (
            remedies.recurrence(self, entries["recurrence"][1]) if "recurrence" in entries else None
        )
        remedies.check(self, node, entries, steps, label, cap)
        remedies.check_label(self, entries, expr, label)
        if len(self.out.problems) > before or target is None or action is None:
            return None
        return Rule(
            name=name,
            expr=expr,
            alertname=alertname,
            target=cast(Target, target),
            action=action,
            description=description,
            for_=for_ or 0.0,
            cooldown=cooldown or 0.0,
            repeat=repeat or 0.0,
            limits=rule_limits or RuleLimits(),
            recover=recover,
            position=self.pos(node),
            escalate=steps,
            class_label=label,
            recurrence=cap,
        )

    def rule_name(self, entries: Entries) -> str:
        """The name, noted for the unique-across-files check; a Kubernetes-label-
        shaped one, since it becomes a label value and an annotation key part."""
        if "name" not in entries:
            return ""
        v = entries["name"][1]
        name = self.string(v, "name") or ""
        if name:
            self.out.names.append((name, self.pos(v)))
            if len(name) > 63 or not _RULE_NAME.match(name):
                self.problem(
                    v,
                    f"rule name {name!r} must be at most 63 lowercase letters, digits "
                    "or '-', starting and ending with a letter or digit",
                )
        return name

    def condition(
        self, node: Node, entries: Entries, target: str | None
    ) -> tuple[str | None, str | None]:
        """What makes the rule fire: an expression it evaluates, or an alert it
        waits for; exactly one of them."""
        expr_node = entries["expr"][1] if "expr" in entries else None
        alert_node = entries["alertname"][1] if "alertname" in entries else None
        expr = alertname = None
        if expr_node is not None and alert_node is not None:
            self.problem(
                alert_node,
                "a rule has expr or alertname, not both (expr is evaluated; alertname "
                "waits for a firing Alertmanager alert)",
            )
        elif expr_node is None and alert_node is None:
            self.problem(node, "a rule: missing required key 'expr' (or 'alertname')")
        if expr_node is not None:
            expr = self.expr(expr_node, "expr", target)
        if alert_node is not None:
            alertname = self.string(alert_node, "alertname")
        return expr, alertname

    def remedy(
        self, node: Node, entries: Entries, target: str | None
    ) -> tuple[Action | None, tuple[Step, ...]]:
        """What the rule does: one action, or a ladder whose first step acts first."""
        action = self.action(entries["action"][1], target) if "action" in entries else None
        steps: tuple[Step, ...] = ()
        if "action" in entries and "escalate" in entries:
            self.problem(
                entries["escalate"][0],
                "a rule has action (one step) or escalate (a ladder of steps), not both",
            )
        elif "escalate" in entries:
            steps = self.ladder(entries["escalate"][1], target, "recover" in entries)
            action = steps[0].action if steps else None
        elif "action" not in entries:
            self.problem(node, "a rule: missing required key 'action' (or 'escalate')")
        return action, steps

    def rule_recover(
        self, entries: Entries, action: Action | None, target: str | None
    ) -> Recover | None:
        """The recover condition, refused beside an action nothing can undo."""
        key_node, v = entries["recover"]
        recover = self.recover(v, target)
        spec = ACTIONS.get(action.type) if action is not None else None
        if "escalate" in entries:
            spec = None  # the ladder's own check, in ``ladder``
        if spec is not None and not spec.reversible:
            self.problem(
                key_node,
                f"recover: {spec.name} cannot be undone, so a rule with it has no recover",
            )
        return recover

    def check_repeat(self, entries: Entries, action: Action | None, repeat: float | None) -> None:
        """repeat is for actions that cannot be undone, and never for a ladder."""
        if "repeat" in entries and "escalate" in entries:
            self.problem(
                entries["repeat"][0],
                "repeat: a ladder acts once per incident and escalates by its steps' timeouts",
            )
        elif "repeat" in entries and action is not None:
            # A remediation acts once per incident; repeating a drain is the repeated
            # eviction this guards against. Capacity and load actions may repeat.
            spec = ACTIONS.get(action.type)
            if spec is not None and spec.reversible:
                self.problem(
                    entries["repeat"][0],
                    f"repeat: {spec.name} acts once per incident (its recover undoes it); "
                    "repeat is for actions that cannot be undone, such as scale_node_pool",
                )
            elif repeat is not None and repeat <= 0:
                self.problem(entries["repeat"][1], "repeat must be more than 0s")

    def action(self, node: Node, target: str | None) -> Action | None:
        entries = self.mapping(node, "action", None, required=("type",))
        if entries is None:
            return None
        type_node = entries["type"][1] if "type" in entries else None
        kind = self.string(type_node, "action type") if type_node is not None else None
        if type_node is None or kind is None:
            return None
        spec = ACTIONS.get(kind)
        if spec is None:
            self.problem(
                type_node,
                f"unknown action type {kind!r}{did_you_mean(kind, list(ACTIONS))} "
                f"(one of {', '.join(ACTIONS)})",
            )
            return None
        values = {k: self.construct(v) for k, (_, v) in entries.items() if k != "type"}
        raw = {k: v for k, (ok, v) in values.items() if ok}
        params, param_problems = spec.validate(raw)
        if target is not None:
            if target not in spec.targets:
                self.problem(
                    type_node,
                    f"action {kind} acts on target {' or '.join(spec.targets)}, not {target!r}",
                )
            else:
                param_problems = param_problems + spec.check_target(params, target)
        for pp_ in param_problems:
            where = type_node
            if pp_.param is not None and pp_.param in entries:
                key_node, value_node = entries[pp_.param]
                where = value_node if pp_.param in spec.keys else key_node
            self.problem(where, str(pp_))
        return Action(kind, params)

    def ladder(self, node: Node, target: str | None, rule_recover: bool) -> tuple[Step, ...]:
        """``escalate``: the steps in order; each step's action validated as a rule's
        would be (its parameters, and whether it acts on the rule's target), a
        ``timeout`` on every step but the last, an optional ``recover``."""
        items = self.sequence(node, "escalate", "a list of steps")
        if items is None:
            return ()
        if not items:
            self.problem(node, "escalate lists no step (for one step, write action:)")
            return ()
        if len(items) > MAX_STEPS:
            self.problem(node, f"escalate has {len(items)} steps; at most {MAX_STEPS}")
            return ()
        before = len(self.out.problems)
        steps: list[Step] = []
        for i, item in enumerate(items, 1):
            entries = self.mapping(item, f"escalate step {i}", STEP_KEYS, required=("action",))
            if entries is None or "action" not in entries:
                continue
            action = self.action(entries["action"][1], target)
            timeout = self.optional_duration(entries, "timeout")
            if "timeout" not in entries and i < len(items):
                self.problem(
                    item,
                    f"escalate step {i}: missing required key 'timeout' (every step but the "
                    "last has one: when it passes without success, the next step starts)",
                )
            recover = self.recover(entries["recover"][1], target) if "recover" in entries else None
            classes = frozenset[str]()
            if "classes" in entries:
                classes = remedies.step_classes(self, entries["classes"][1], i)
            if action is not None:
                steps.append(Step(action, timeout, recover, self.pos(item), classes))
        if len(self.out.problems) > before:
            return ()
        wants_undo = rule_recover or any(s.recover is not None for s in steps)
        if not wants_undo and steps[-1].timeout is None:
            self.problem(
                items[-1],
                "escalate: with no recover, nothing ends this ladder; give its last step a "
                "timeout (or the rule a recover), or its node counts as unhealthy for good",
            )
        if wants_undo and not any(_reversible(s.action.type) for s in steps):
            self.problem(
                node,
                "recover: no step of this ladder can be undone, so the rule has no "
                "recover (make one step cordon, taint, drain or migrate_jobs)",
            )
        return tuple(steps)

    def rule_limits(self, node: Node) -> RuleLimits | None:
        entries = self.mapping(node, "rule limits", RULE_LIMITS_KEYS)
        if entries is None:
            return None
        counts = {k: self.integer(v, k, maximum=_MAX_COUNT[k]) for k, (_, v) in entries.items()}
        return RuleLimits(
            max_concurrent=counts.get("maxConcurrent"),
            max_actions_per_hour=counts.get("maxActionsPerHour"),
        )

    def recover(self, node: Node, target: str | None) -> Recover | None:
        entries = self.mapping(node, "recover", RECOVER_KEYS, required=("expr",))
        if entries is None:
            return None
        expr = self.expr(entries["expr"][1], "recover expr", target) if "expr" in entries else None
        for_ = self.optional_duration(entries, "for")
        return Recover(expr, for_ or 0.0) if expr is not None else None

    def expr(self, node: Node, what: str, target: str | None) -> str | None:
        """A PromQL expression: it parses, returns a vector, can carry the target's
        labels, names known metrics, and (scrape) the built-in evaluator runs it."""
        text = self.string(node, what)
        if text is None:
            return None
        try:
            ast = parse(text)
        except ExprError as e:
            self.invalid_promql(node, what, text, str(e))
            return text
        kind = value_type(ast)
        if kind != "vector":
            self.problem(
                node,
                f"{what} must return an instant vector (one sample per target), "
                f"but returns a {kind}",
            )
        if target in TARGET_LABELS:
            missing = missing_labels(ast, TARGET_LABELS[target])
            if missing:
                many = len(missing) > 1
                self.problem(
                    node,
                    f"{what} can never carry the {', '.join(repr(m) for m in missing)} "
                    f"{'labels that name' if many else 'label that names'} a {target} target; "
                    f"keep {'them' if many else 'it'} in by (...) and on (...)",
                )
        for name in sorted(_metric_names(ast)):
            if (
                name.startswith(_OWN_PREFIX)
                and not name.startswith(_SELF_PREFIX)
                and name not in KNOWN_METRICS
            ):
                self.problem(
                    node,
                    f"{what}: unknown metric {name!r}{did_you_mean(name, sorted(KNOWN_METRICS))} "
                    "(not in exporter/schema.py nor autoscaler/clusterstate.py)",
                )
        if self.source == "scrape":
            from autoscaler.promql.support import unsupported

            for reason in unsupported(text):
                self.problem(
                    node,
                    f"{what}: not supported by the built-in evaluator (--source scrape): {reason}",
                )
        return text

    def invalid_promql(self, node: Node, what: str, text: str, message: str) -> None:
        """A parse error at its token's line and column in the file, where that
        can be told; else at the expression, with the character when known."""
        # Past the first few, only what costs no parse is located (a bracket,
        # a quote, a function's name, guard's "at character N").
        budget = BUDGET if self.located_errors < _LOCATED_PER_FILE else 0
        self.located_errors += 1
        offset = error_offset(text, message, budget)
        if offset is None:
            self.problem(node, f"{what}: invalid PromQL: {message}")
            return
        token = token_at(text, offset)
        near = f"at {token!r}" if token else "at the end of the expression"
        position, exact = self.position_in(node, offset)
        if not exact:
            near += f" (character {offset + 1} of the expression)"
        self.at(position, f"{what}: invalid PromQL {near}: {message}")

    def bounded_duration(self, node: Node, key: str) -> float | None:
        low, high = _BOUNDS[key]
        return self.duration(node, key, minimum=low or None, maximum=high)

    def optional_duration(self, entries: Entries, key: str) -> float | None:
        return self.bounded_duration(entries[key][1], key) if key in entries else None


def _reversible(action: str) -> bool:
    spec = ACTIONS.get(action)
    return spec is not None and spec.reversible


def _metric_names(ast: pp.Expr) -> set[str]:
    """Every metric name the expression selects."""
    names: set[str] = set()
    for e in vector_selectors(ast):
        if e.name:
            names.add(e.name)
        for m in e.matchers.matchers:
            if m.name == "__name__" and m.op == pp.MatchOp.Equal:
                names.add(m.value)
    return names


# --- merging files ------------------------------------------------------------------


_LIMIT_FIELDS: dict[str, Callable[[Any], dict[str, Any]]] = {
    "maxUnhealthyNodes": lambda v: (
        {"max_unhealthy_nodes": int(v[1])} if v[0] == "count" else {"max_unhealthy_ratio": v[1]}
    ),
    "maxConcurrentDrains": lambda v: {"max_concurrent_drains": v},
    "maxActionsPerHour": lambda v: {"max_actions_per_hour": v},
    "breakerReset": lambda v: {"breaker_reset": v},
    "breakerWindow": lambda v: {"breaker_window": v},
    "scaleUpGrace": lambda v: {"scale_up_grace": v},
}


def _merge(parsed: Sequence[_ParsedFile], problems: list[Problem]) -> RuleSet:
    interval: _Setting | None = None
    limits: dict[str, _Setting] = {}
    rules: list[Rule] = []
    names: dict[str, list[Position]] = {}
    for f in parsed:
        problems.extend(f.problems)
        if f.evaluation_interval is not None:
            if interval is None:
                interval = f.evaluation_interval
            elif interval.value != f.evaluation_interval.value:
                problems.append(_conflict("evaluationInterval", f.evaluation_interval, interval))
        for key, setting in f.limits.items():
            first = limits.setdefault(key, setting)
            if first.value != setting.value:
                problems.append(_conflict(f"limits.{key}", setting, first))
        rules.extend(f.rules)
        for name, pos in f.names:
            names.setdefault(name, []).append(pos)
    for name, positions in names.items():
        if len(positions) < 2:
            continue
        for pos in positions:
            others = ", ".join(str(p) for p in positions if p != pos)
            problems.append(Problem(pos, f"duplicate rule name {name!r} (also at {others})"))
    fields: dict[str, Any] = {}
    for key, setting in limits.items():
        fields.update(_LIMIT_FIELDS[key](setting.value))
    return RuleSet(
        evaluation_interval=interval.value
        if interval is not None
        else RuleSet().evaluation_interval,
        limits=Limits(**fields),
        rules=tuple(rules),
        files=tuple(f.file for f in parsed),
    )


def _conflict(key: str, setting: _Setting, first: _Setting) -> Problem:
    return Problem(
        setting.position,
        f"{key}: {setting.text!r} conflicts with {first.text!r} set at {first.position} "
        "(files that set it must agree)",
    )


__all__ = [
    "API_VERSION",
    "KIND",
    "KNOWN_METRICS",
    "SOURCES",
    "Problem",
    "RuleSetError",
    "load_ruleset",
    "rule_files",
]
