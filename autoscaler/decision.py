"""A Decision: what the engine decided, and why. The API, the decision log, the
rule unit tests and the Kubernetes actions all read it.

It sits at the bottom of the autoscaler, beside ``types``, because both ends of
the house speak it: the engine makes decisions and the actions carry them out,
while the rule set is validated against the actions' parameter specs (so the
actions sit below the rule set and the engine, and must not import the engine to
learn what a decision is)."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Literal

from autoscaler.types import Labels


@dataclass(frozen=True)
class Decision:
    rule: str
    # "act" applies the rule's action; "recover" undoes it (the rule's recover held).
    kind: Literal["act", "recover"]
    action: str
    params: Mapping[str, Any]
    # The labels that name what is acted on: {"node": ...}, plus "device" or
    # "namespace"/"pod" for device and pod targets.
    target: Mapping[str, str]
    # The sample that caused it (labels and value), for the log and the API.
    sample_labels: Labels
    sample_value: float
    at: float
    dry_run: bool = False
    reason: str = ""
    # What a kind of decision adds: a ladder step's ``{"step": i, "incident": t}`` (i
    # 1-based; t when the ladder's first step acted, the identity its actions
    # build request ids from).
    extra: Mapping[str, Any] = field(default_factory=dict)

    def key(self) -> tuple[str, str, str, tuple[tuple[str, str], ...]]:
        """What a rule unit test compares: rule, kind/action and target."""
        return (self.rule, self.kind, self.action, tuple(sorted(self.target.items())))

    def as_json(self) -> dict[str, Any]:
        return {
            "rule": self.rule,
            "kind": self.kind,
            "action": self.action,
            "params": dict(self.params),
            "target": dict(self.target),
            "sample": {"labels": dict(self.sample_labels), "value": self.sample_value},
            "at": self.at,
            "dryRun": self.dry_run,
            "reason": self.reason,
            **({"extra": dict(self.extra)} if self.extra else {}),
        }
