"""What every action shares: its registry entry (``ActionSpec``), the problem type
its validation returns, and a reader that checks raw YAML parameters.

Following the descheduler, each action keeps its parameters, their defaults and
their validation beside it, in its own file; this module holds only what would
otherwise be copied into each of them. Validation never stops at the first
mistake: ``ParamReader`` records a problem and carries on with the default, so an
operator sees every bad parameter of a rule at once.

Parameters are written in YAML in camelCase (``drainTimeout``), and the
validated ``params`` mapping that ends up in ``Action.params`` (and in every
``Decision``) keeps those keys, with durations turned into seconds and defaults
filled in. Each action's frozen ``Params`` dataclass names the same keys in its
field metadata, so ``from_params`` gives the executing code typed values back.
"""

from __future__ import annotations

import dataclasses
import math
import re
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, TypeVar

from accel_common.durations import duration_seconds
from accel_common.names import DEFAULT_TAINT
from accel_common.suggest import did_you_mean
from autoscaler.actions.context import ActionContext, Outcome
from autoscaler.decision import Decision

if TYPE_CHECKING:
    from _typeshed import DataclassInstance

T = TypeVar("T")
P = TypeVar("P", bound="DataclassInstance")


@dataclass(frozen=True)
class ParamProblem:
    """A problem with one parameter (``param``), or with the action as a whole
    (``param`` None). The loader turns ``param`` into a file position."""

    param: str | None
    message: str

    def __str__(self) -> str:
        return f"{self.param}: {self.message}" if self.param else self.message


Validate = Callable[[Mapping[str, Any]], tuple[dict[str, Any], list[ParamProblem]]]
CheckTarget = Callable[[Mapping[str, Any], str], list[ParamProblem]]
# ``execute(ctx, decision)``: carry out an ``act`` or ``recover`` decision through
# ``ctx.kube``. Idempotent and resumable: running it again after a crash finishes
# the work without repeating what was done (see autoscaler/actions/ops/ownership.py).
Execute = Callable[[ActionContext, Decision], Awaitable[Outcome]]


def no_target_problems(params: Mapping[str, Any], target: str) -> list[ParamProblem]:
    """For actions whose parameters mean the same for every target they accept."""
    return []


@dataclass(frozen=True)
class ActionSpec:
    """An action type as the rule loader and the engine see it."""

    name: str
    # The rule targets the action accepts (see autoscaler.ruleset.model.TARGETS).
    targets: tuple[str, ...]
    # Whether a rule's ``recover`` block can undo it (uncordon, remove the taint).
    reversible: bool
    params_type: type[Any]
    # ``validate(raw)``: raw parameters (the action mapping without ``type``) to
    # (params with defaults, problems).
    validate: Validate
    # Problems that only appear with a given target (``deviceOnly`` on a node).
    check_target: CheckTarget = no_target_problems
    # How the action changes the cluster; None only while an action is being written.
    execute: Execute | None = None

    @property
    def keys(self) -> tuple[str, ...]:
        return param_keys(self.params_type)


def param(key: str, default: T) -> T:
    """A ``Params`` field written as ``key`` in YAML, with its default."""
    result: T = dataclasses.field(default=default, metadata={"key": key})
    return result


def param_keys(cls: type[Any]) -> tuple[str, ...]:
    return tuple(str(f.metadata.get("key", f.name)) for f in dataclasses.fields(cls))


def to_params(value: DataclassInstance) -> dict[str, Any]:
    """A ``Params`` instance as the mapping kept in ``Action.params``."""
    return {
        str(f.metadata.get("key", f.name)): getattr(value, f.name)
        for f in dataclasses.fields(value)
    }


def from_params(cls: type[P], params: Mapping[str, Any]) -> P:
    """The typed ``Params`` back from a validated ``Action.params`` mapping."""
    kwargs = {
        f.name: params[str(f.metadata.get("key", f.name))]
        for f in dataclasses.fields(cls)
        if str(f.metadata.get("key", f.name)) in params
    }
    return cls(**kwargs)


# Kubernetes label (and taint) keys and values: an optional DNS-subdomain prefix and
# a name of up to 63 characters; values are names or empty.
_NAME = re.compile(r"^[A-Za-z0-9]([-A-Za-z0-9_.]*[A-Za-z0-9])?$")
_PREFIX = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$")


def label_key_problem(key: str) -> str | None:
    """Why ``key`` is not a valid Kubernetes label or taint key, or None."""
    prefix, slash, name = key.rpartition("/")
    if slash and (not prefix or len(prefix) > 253 or not _PREFIX.match(prefix)):
        return f"invalid key prefix {prefix!r} (a DNS subdomain, e.g. accel-fleet.io)"
    if not name or len(name) > 63 or not _NAME.match(name):
        return (
            f"invalid key {key!r} (at most 63 letters, digits, '-', '_' or '.', "
            "starting and ending with a letter or digit, after an optional 'prefix/')"
        )
    return None


def label_value_problem(value: str) -> str | None:
    """Why ``value`` is not a valid Kubernetes label or taint value, or None."""
    if value and (len(value) > 63 or not _NAME.match(value)):
        return (
            f"invalid value {value!r} (at most 63 letters, digits, '-', '_' or '.', "
            "starting and ending with a letter or digit)"
        )
    return None


class ParamReader:
    """Reads raw parameters one by one, recording a problem (and returning the
    default) for each that is wrong, so that ``validate`` reports them all."""

    def __init__(self, action: str, raw: Mapping[str, Any], keys: Sequence[str]) -> None:
        self.action = action
        self.raw = raw
        self.problems: list[ParamProblem] = []
        for k in raw:
            if k in keys:
                continue
            name = str(k)
            if not keys:
                self.problems.append(
                    ParamProblem(name, f"unknown parameter: {action} takes no parameters")
                )
            else:
                self.problems.append(
                    ParamProblem(
                        name,
                        f"unknown parameter for {action}{did_you_mean(name, keys)}"
                        f" ({action} takes {', '.join(keys)})",
                    )
                )

    def problem(self, key: str | None, message: str) -> None:
        self.problems.append(ParamProblem(key, message))

    def _get(self, key: str) -> tuple[bool, Any]:
        if key not in self.raw or self.raw[key] is None:
            return False, None
        return True, self.raw[key]

    def duration(self, key: str, default: float, *, positive: bool = False) -> float:
        present, value = self._get(key)
        if not present:
            return default
        try:
            seconds = duration_seconds(value)
        except ValueError as e:
            self.problem(key, str(e))
            return default
        if positive and seconds <= 0:
            self.problem(key, f"must be longer than 0s, got {value!r}")
            return default
        return seconds

    def integer(self, key: str, default: T, *, minimum: int = 0) -> int | T:
        present, value = self._get(key)
        if not present:
            return default
        if isinstance(value, bool) or not isinstance(value, int):
            self.problem(key, f"must be a whole number, got {value!r}")
            return default
        if value < minimum:
            self.problem(key, f"must be at least {minimum}, got {value}")
            return default
        return value

    def ratio(self, key: str, default: float, *, low: float = 0.0, high: float = 1.0) -> float:
        present, value = self._get(key)
        if not present:
            return default
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            self.problem(key, f"must be a number from {low:g} to {high:g}, got {value!r}")
            return default
        if not low <= value <= high:
            self.problem(key, f"must be from {low:g} to {high:g}, got {value!r}")
            return default
        return float(value)

    def number(self, key: str, default: float, *, minimum: float = 0.0) -> float:
        present, value = self._get(key)
        if not present:
            return default
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            self.problem(key, f"must be a number, got {value!r}")
            return default
        if not math.isfinite(value) or value < minimum:
            self.problem(key, f"must be a finite number of at least {minimum:g}, got {value!r}")
            return default
        return float(value)

    def boolean(self, key: str, default: bool) -> bool:
        present, value = self._get(key)
        if not present:
            return default
        if not isinstance(value, bool):
            self.problem(key, f"must be true or false, got {value!r}")
            return default
        return value

    def string(self, key: str, default: T) -> str | T:
        present, value = self._get(key)
        if not present:
            return default
        if not isinstance(value, str):
            self.problem(key, f"must be a string, got {value!r}")
            return default
        return value

    def choice(self, key: str, choices: Sequence[str], default: str | None) -> str | None:
        """One of ``choices``; with ``default`` None the parameter is required."""
        present, value = self._get(key)
        if not present:
            if default is None:
                self.problem(key, f"missing: {self.action} needs {key} {' or '.join(choices)}")
            return default
        if not isinstance(value, str) or value not in choices:
            self.problem(
                key,
                f"must be {' or '.join(choices)}, got {value!r}{did_you_mean(str(value), choices)}",
            )
            return default
        return value


__all__ = [
    "EFFECTS",
    "ActionSpec",
    "CheckTarget",
    "Execute",
    "ParamProblem",
    "ParamReader",
    "Taint",
    "Validate",
    "from_params",
    "label_key_problem",
    "label_value_problem",
    "no_target_problems",
    "param",
    "param_keys",
    "parse_taint",
    "read_taint",
    "taint_problems",
    "to_params",
]


# -- taints: the parameter of taint and migrate_jobs, and what ops/nodes applies -----

EFFECTS = ("NoSchedule", "PreferNoSchedule", "NoExecute")


@dataclass(frozen=True)
class Taint:
    key: str
    value: str
    effect: str

    def __str__(self) -> str:
        return (
            f"{self.key}={self.value}:{self.effect}" if self.value else f"{self.key}:{self.effect}"
        )


def taint_problems(text: str) -> list[str]:
    """Every reason ``text`` is not a taint in kubectl's ``key=value:Effect`` form."""
    spec, colon, effect = text.rpartition(":")
    if not colon:
        return [f"{text!r} has no effect (use key=value:Effect, e.g. {DEFAULT_TAINT})"]
    problems: list[str] = []
    key, _, value = spec.partition("=")
    for problem in (label_key_problem(key), label_value_problem(value)):
        if problem is not None:
            problems.append(f"{text!r}: {problem}")
    if effect not in EFFECTS:
        problems.append(
            f"{text!r}: effect must be {', '.join(EFFECTS)}, got {effect!r}"
            f"{did_you_mean(effect, EFFECTS)}"
        )
    return problems


def parse_taint(text: str) -> Taint:
    """A validated taint string as its parts; raises ValueError naming every problem."""
    problems = taint_problems(text)
    if problems:
        raise ValueError("; ".join(problems))
    spec, _, effect = text.rpartition(":")
    key, _, value = spec.partition("=")
    return Taint(key, value, effect)


def read_taint(r: ParamReader, key: str, default: str) -> str:
    """The taint parameter of ``taint`` and ``migrate_jobs``."""
    text = r.string(key, default)
    problems = taint_problems(text)
    for problem in problems:
        r.problem(key, problem)
    return default if problems else text
