"""The controller's state record (``autoscaler/engine/record.py``), fuzzed with
hypothesis: records as the controller writes them, with one to three values
replaced by a value of any type or by JSON text no encoder writes (nesting
thousands deep, ``NaN``, ``Infinity``, ``1e999``, a 5,000-digit integer).

Every case gives a state or a ``RecordError``, nothing else; a state holds no time
past a day from now and no non-finite number; what it would write back reads back
to the same state with nothing refused (a refused value is never written back); and
the whole of it goes through ``restore`` and ``evaluate`` without raising.
"""

from __future__ import annotations

import json
import math
import tempfile
from pathlib import Path
from typing import Any

from hypothesis import given
from hypothesis import strategies as st

from autoscaler.engine import evaluate
from autoscaler.engine.record import FUTURE_SLACK, RecordError, parse_record, record_text
from autoscaler.engine.restore import restore
from autoscaler.engine.state import EngineState
from autoscaler.ruleset.loader import load_ruleset
from tests.fuzz.harness import budget, check
from tests.fuzz.strategies import wrong_values

NOW = 1_800_000_000.0
TARGET = {"node": "n1", "device": "nvidia0"}
SEED: dict[str, Any] = {
    "version": 1,
    "breaker": {"open": False, "openedAt": None, "reason": ""},
    "cooldowns": [{"rule": "broken", "target": TARGET, "lastActedAt": NOW - 60}],
    "actions": [{"at": NOW - 60, "rule": "broken"}, {"at": NOW - 30, "rule": "broken"}],
    "incidents": [
        {"rule": "broken", "target": TARGET, "since": NOW - 90, "ids": [], "handledAt": NOW - 60}
    ],
    "active": [
        {
            "rule": "stuck",
            "target": {"namespace": "ml", "pod": "p"},
            "since": NOW - 60,
            "action": "requeue_job",
            "node": None,
        }
    ],
    "ladders": [
        {
            "rule": "broken",
            "target": TARGET,
            "step": 2,
            "since": NOW - 30,
            "started": NOW - 60,
            "outcome": "failed",
            "labels": {"uuid": "GPU-1", **TARGET},
        }
    ],
}
HOSTILE_JSON = ("[" * 5000 + "]" * 5000, "NaN", "Infinity", "-Infinity", "1e999", "9" * 5000)
_MARK = "zzhostilezz"
RULES = """\
apiVersion: accel-fleet/v1
kind: RuleSet
spec:
  evaluationInterval: 1m
  rules:
    - name: broken
      expr: accel_up == 0
      target: device
      escalate:
        - action: {type: migrate_jobs}
          timeout: 5m
        - action: {type: reboot_node}
          timeout: 30m
      recover: {expr: accel_up == 1, for: 5m}
"""


def _paths(tree: Any, prefix: tuple[Any, ...] = ()) -> list[tuple[Any, ...]]:
    out = [prefix]
    if isinstance(tree, dict):
        for k, v in tree.items():
            out += _paths(v, (*prefix, k))
    elif isinstance(tree, list):
        for i, v in enumerate(tree):
            out += _paths(v, (*prefix, i))
    return out


def _set(tree: Any, path: tuple[Any, ...], value: Any) -> Any:
    if not path:
        return value
    node = tree
    for step in path[:-1]:
        node = node[step]
    node[path[-1]] = value
    return tree


@st.composite
def records(draw: st.DrawFn) -> str:
    doc: Any = json.loads(json.dumps(SEED))
    paths = _paths(doc)
    for _ in range(draw(st.integers(0, 3))):
        doc = _set(doc, draw(st.sampled_from(paths)), draw(wrong_values))
        paths = _paths(doc)
    hostile = draw(st.none() | st.sampled_from(HOSTILE_JSON))
    if hostile is not None:
        doc = _set(doc, draw(st.sampled_from(paths)), _MARK)
    try:
        text = json.dumps(doc)
    except (TypeError, ValueError):
        text = repr(doc)
    return text if hostile is None else text.replace(f'"{_MARK}"', hostile, 1)


def _times(state: EngineState) -> list[float]:
    out = [*state.last_acted.values(), *(at for at, _ in state.actions)]
    out += [i.since for i in state.incidents.values()]
    out += [i.handled for i in state.incidents.values() if i.handled is not None]
    out += [a.since for a in state.active.values()]
    out += [x for lad in state.ladders.values() for x in (lad.since, lad.started)]
    return out


def _ruleset() -> Any:
    with tempfile.TemporaryDirectory() as d:
        path = Path(d) / "rules.yaml"
        path.write_text(RULES)
        return load_ruleset([path])


RULESET = _ruleset()


@budget(400)
@given(text=records() | st.text(max_size=300))
def test_state_record(text: str) -> None:
    def read() -> None:
        problems: list[str] = []
        state = parse_record(text, now=NOW, problems=problems)
        assert all(math.isfinite(t) and 0 <= t <= NOW + FUTURE_SLACK for t in _times(state))
        assert all(lad.step >= 1 for lad in state.ladders.values())
        again: list[str] = []
        assert record_text(parse_record(record_text(state), now=NOW, problems=again)) == (
            record_text(state)
        )
        assert again == []
        restore(EngineState(), [], state, "accel-autoscaler", RULESET, NOW)
        evaluate(RULESET, {}, state, NOW)

    check("state record", read, (RecordError,))
