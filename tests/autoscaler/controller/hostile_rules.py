"""The rule files of issue 15 that once crashed, froze or silenced a running
controller, each as the text of one file that replaces a good one on hot reload.

Every one of them is refused now by some layer (the bounded YAML reader, the
loader's ranges, the PromQL guard, or the watcher that turns any exception into
a failed reload); the controller tests feed them to a running controller and
hold that it stays up and keeps its last good rules whichever layer refuses.
"""

from __future__ import annotations

HEADER = """\
apiVersion: accel-fleet/v1
kind: RuleSet
spec:
  evaluationInterval: {interval}
"""

# The good rule: an Alertmanager alert cordons its node, so that a test can see
# the rules in force act without any metrics source.
ALERT_RULE = """\
    - name: gpu-fault-alert
      alertname: GPUFault
      target: node
      action: {type: cordon}
      cooldown: 1h
"""


def good(interval: str = "1s", description: str = "") -> str:
    """A rule file that loads: one alert rule, evaluated every ``interval``."""
    rule = ALERT_RULE
    if description:
        rule += f"      description: {description}\n"
    return HEADER.format(interval=interval) + "  rules:\n" + rule


def _expr_rule(expr: str) -> str:
    return HEADER.format(interval="1s") + (
        "  rules:\n"
        + ALERT_RULE
        + "    - name: hostile\n"
        + f"      expr: '{expr}'\n"
        + "      target: node\n"
        + "      action: {type: cordon}\n"
    )


def _bomb(levels: int = 9, width: int = 9) -> str:
    """A billion-laughs sequence as one flow node: ``width ** levels`` strings once
    every alias is expanded."""
    parts = ["&a0 [" + ", ".join(["lol"] * width) + "]"]
    for i in range(1, levels + 1):
        parts.append(f"&a{i} [" + ", ".join([f"*a{i - 1}"] * width) + "]")
    return "[" + ", ".join(parts) + "]"


def _nested(depth: int) -> str:
    return "[" * depth + "]" * depth


def _sum(terms: int) -> str:
    return " + ".join(["x"] * terms) + " > 0"


HOSTILE: dict[str, str] = {
    # The native PromQL parser overflowed its stack on these (SIGSEGV/SIGABRT).
    "promql-nested-12000": _expr_rule("(" * 12_000 + "accel_up" + ")" * 12_000 + " == 0"),
    "promql-sum-8000": _expr_rule(_sum(8_000)),
    # Python's recursion limit in the compilers of the built-in evaluator.
    "promql-sum-1500": _expr_rule(_sum(1_500)),
    # Billion laughs where the loader constructs a value.
    "alias-bomb-target": HEADER.format(interval="1s")
    + "  rules:\n"
    + ALERT_RULE.replace("target: node", f"target: {_bomb()}"),
    "alias-bomb-breakerReset": HEADER.format(interval="1s")
    + f"  limits: {{breakerReset: {_bomb()}}}\n"
    + "  rules:\n"
    + ALERT_RULE,
    "alias-bomb-action-parameter": HEADER.format(interval="1s")
    + "  rules:\n"
    + ALERT_RULE.replace("{type: cordon}", f"{{type: taint, taint: {_bomb()}}}"),
    # int() refuses more than 4,300 digits with a ValueError of its own.
    "integer-5000-digits": HEADER.format(interval="1s")
    + f"  limits: {{maxConcurrentDrains: {'9' * 5_000}}}\n"
    + "  rules:\n"
    + ALERT_RULE,
    # PyYAML's composer recurses once per level.
    "yaml-nested-5000": HEADER.format(interval="1s")
    + "  rules:\n"
    + ALERT_RULE
    + f"      description: {_nested(5_000)}\n",
    # Read as infinity: evaluation would stop for good.
    "interval-1e400s": good(interval="1e400s"),
}

__all__ = ["HOSTILE", "good"]
