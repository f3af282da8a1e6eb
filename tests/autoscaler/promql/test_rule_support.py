"""``check --source scrape`` accepts the PromQL 2.42 that rule authors write.

The built-in evaluator covers PromQL 2.42's instant queries, so a rule set meant
for the ``scrape`` source may use ``topk``, ``label_replace``, ``predict_linear``
and subqueries; ``check`` must pass it (exit 0), and the evaluator must then run
each expression. What stays refused is named with its reason.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from autoscaler.commands.check import check
from autoscaler.promql.evaluator import Evaluator
from autoscaler.promql.store import SeriesStore
from autoscaler.ruleset.loader import load_ruleset
from autoscaler.types import Vector

RULES = """\
apiVersion: accel-fleet/v1
kind: RuleSet
spec:
  evaluationInterval: 15s
  rules:
    - name: hottest-devices
      expr: topk(2, accel_temperature_celsius) > 90
      target: device
      action: {type: cordon}
    - name: filling-memory
      expr: >-
        predict_linear(accel_memory_used_bytes[30m], 3600)
        > on(node, device) accel_memory_total_bytes
      target: device
      action: {type: cordon}
    - name: busy-node
      expr: >-
        label_replace(avg by (node) (max_over_time(rate(accel_energy_joules_total[5m])[30m:1m])),
        "host", "$1", "node", "(.*)") > 300
      target: node
      action: {type: cordon}
"""


@pytest.fixture
def rules(tmp_path: Path) -> Path:
    path = tmp_path / "rules.yaml"
    path.write_text(RULES, encoding="utf-8")
    return path


def test_check_scrape_accepts_topk_label_replace_predict_linear_and_a_subquery(
    rules: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert check([rules], source="scrape") == 0
    assert "3 rules OK" in capsys.readouterr().out


def test_the_accepted_rules_evaluate(rules: Path) -> None:
    store = SeriesStore(retention=7200)
    for i in range(0, 3600, 15):
        for dev in range(4):
            labels = {"node": f"n{dev % 2}", "device": f"nvidia{dev}"}
            store.add({"__name__": "accel_temperature_celsius", **labels}, i, 80.0 + dev * 5)
            store.add({"__name__": "accel_memory_used_bytes", **labels}, i, 1e9 + i * 1e6 * dev)
            store.add({"__name__": "accel_memory_total_bytes", **labels}, i, 4e9)
            store.add({"__name__": "accel_energy_joules_total", **labels}, i, i * 350.0 * dev)
    ev = Evaluator(store)
    firing: dict[str, list[tuple[tuple[str, str], ...]]] = {}
    for rule in load_ruleset([rules], source="scrape").rules:
        assert rule.expr is not None
        result = ev.instant(rule.expr, 3600)
        assert isinstance(result, Vector)
        firing[rule.name] = sorted(s.labels for s in result.samples)
    assert [dict(ls)["device"] for ls in firing["hottest-devices"]] == ["nvidia3"]
    # Used memory grows by 1 MB/s per device index: all but nvidia0 fill 4 GB within the hour.
    assert [dict(ls)["device"] for ls in firing["filling-memory"]] == [
        "nvidia1",
        "nvidia2",
        "nvidia3",
    ]
    # 350 J/s per device index, averaged per node; the host label copies the node.
    assert firing["busy-node"] == [
        (("host", "n0"), ("node", "n0")),
        (("host", "n1"), ("node", "n1")),
    ]


def test_check_scrape_still_names_what_it_refuses(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = tmp_path / "rules.yaml"
    path.write_text(
        RULES.replace("topk(2, accel_temperature_celsius)", "accel_temperature_celsius @ -5")
    )
    assert check([path], source="scrape") == 1
    assert "a negative @ time is not supported" in capsys.readouterr().err
