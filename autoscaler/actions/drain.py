"""``drain``: cordon a node, then evict its pods through the Eviction API.

Evictions, not deletions: the API server honours PodDisruptionBudgets and answers
429 when a budget would be broken, so a drain can take a while and may not finish;
``drainTimeout`` bounds how long the action keeps trying before it reports the
pods it could not move. DaemonSet pods and mirror pods are left alone, as
``kubectl drain`` does. A ``device`` target drains the device's node. A rule's
``recover`` block undoes the cordon.

Targets: ``node``, ``device`` (acts on the device's node).

Parameters:

======================  ===========================================  =========
``drainTimeout``        how long to keep evicting (duration, > 0)    ``10m``
``gracePeriodSeconds``  termination grace period for evicted pods;   pod's own
                        whole number >= 0
``podSelector``         only evict pods matching this label          all pods
                        selector (``app=train,tier!=infra``,
                        ``team in (a,b)``, ``!canary``)
======================  ===========================================  =========
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from autoscaler.actions.base import (
    ActionSpec,
    ParamProblem,
    ParamReader,
    label_key_problem,
    label_value_problem,
    param,
    param_keys,
    to_params,
)

NAME = "drain"
TARGETS = ("node", "device")
DEFAULT_DRAIN_TIMEOUT = 600.0

_KEY = r"[A-Za-z0-9_./-]+"
_EXISTS = re.compile(rf"^(!?)\s*({_KEY})$")
_EQUALITY = re.compile(rf"^({_KEY})\s*(==|=|!=)\s*(\S*)$")
_SET = re.compile(rf"^({_KEY})\s+(in|notin)\s*\((.*)\)$")


def _split(selector: str) -> list[str]:
    """Requirements separated by commas outside parentheses."""
    parts, depth, start = [], 0, 0
    for i, ch in enumerate(selector):
        if ch == "(":
            depth += 1
        elif ch == ")":
            depth -= 1
        elif ch == "," and depth == 0:
            parts.append(selector[start:i])
            start = i + 1
    parts.append(selector[start:])
    return [p.strip() for p in parts]


def selector_problems(selector: str) -> list[str]:
    """Every reason ``selector`` is not a Kubernetes label selector string."""
    if not selector.strip():
        return []
    problems: list[str] = []
    for req in _split(selector):
        keys: list[str] = []
        values: list[str] = []
        if m := _SET.match(req):
            keys.append(m.group(1))
            values.extend(v.strip() for v in m.group(3).split(","))
            if values == [""]:
                problems.append(f"{req!r}: an 'in'/'notin' set needs at least one value")
                values = []
        elif m := _EQUALITY.match(req):
            keys.append(m.group(1))
            values.append(m.group(3))
        elif m := _EXISTS.match(req):
            keys.append(m.group(2))
        else:
            problems.append(
                f"{req!r} is not a label selector requirement "
                "(use key=value, key!=value, key in (a,b), key notin (a,b), key or !key)"
            )
            continue
        for problem in [label_key_problem(k) for k in keys] + [
            label_value_problem(v) for v in values
        ]:
            if problem is not None:
                problems.append(f"{req!r}: {problem}")
    return problems


@dataclass(frozen=True)
class DrainParams:
    drain_timeout: float = param("drainTimeout", DEFAULT_DRAIN_TIMEOUT)
    grace_period_seconds: int | None = param("gracePeriodSeconds", None)
    pod_selector: str | None = param("podSelector", None)


DEFAULTS = DrainParams()


def read_selector(r: ParamReader, key: str) -> str | None:
    selector = r.string(key, None)
    if selector is None:
        return None
    problems = selector_problems(selector)
    for problem in problems:
        r.problem(key, problem)
    return None if problems else selector


def validate(raw: Mapping[str, Any]) -> tuple[dict[str, Any], list[ParamProblem]]:
    r = ParamReader(NAME, raw, param_keys(DrainParams))
    params = DrainParams(
        drain_timeout=r.duration("drainTimeout", DEFAULTS.drain_timeout, positive=True),
        grace_period_seconds=r.integer("gracePeriodSeconds", None, minimum=0),
        pod_selector=read_selector(r, "podSelector"),
    )
    return to_params(params), r.problems


SPEC = ActionSpec(NAME, TARGETS, reversible=True, params_type=DrainParams, validate=validate)
