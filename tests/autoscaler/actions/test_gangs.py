"""The pure parts of the gang restart: how many restarts a JobSet's failure policy
has left (which decides whether deleting its pods restarts it or ends it), and a
restart record that is not ours to read."""

from __future__ import annotations

from typing import Any

import pytest

from accel_common.names import GANG_RESTARTS_ANNOTATION
from autoscaler.actions.ops.gangs import record, restarts_left
from autoscaler.actions.ops.unknown import UnknownFact


def jobset(policy: dict[str, Any] | None, **status: int) -> dict[str, Any]:
    spec = {"failurePolicy": policy} if policy is not None else {}
    return {"metadata": {"name": "js"}, "spec": spec, "status": dict(status)}


@pytest.mark.parametrize(
    ("obj", "left"),
    [
        (jobset(None), 0),  # no failure policy: the first failed Job fails the JobSet
        (jobset({"maxRestarts": 3}), 3),
        (jobset({"maxRestarts": 3}, restarts=2, restartsCountTowardsMax=1), 2),
        (jobset({"maxRestarts": 3}, restarts=3), 0),  # older JobSets count restarts only
        (jobset({"maxRestarts": 3, "rules": [{"name": "r", "action": "FailJobSet"}]}), 0),
        (
            jobset(
                {
                    "maxRestarts": 3,
                    "rules": [
                        {
                            "name": "r",
                            "action": "FailJobSet",
                            "onJobFailureReasons": ["PodFailurePolicy"],
                        }
                    ],
                }
            ),
            3,
        ),
        (
            jobset(
                {
                    "maxRestarts": 3,
                    "rules": [
                        {
                            "name": "r",
                            "action": "FailJobSet",
                            "onJobFailureReasons": ["BackoffLimitExceeded"],
                        }
                    ],
                }
            ),
            0,
        ),
    ],
)
def test_restarts_left(obj: dict[str, Any], left: int) -> None:
    assert restarts_left(obj) == left


def test_an_empty_record_reads_as_none() -> None:
    assert record({"metadata": {"annotations": {GANG_RESTARTS_ANNOTATION: ""}}}) == {}
    assert record(None) == {}


@pytest.mark.parametrize("raw", ["not json", "[1, 2]", '"text"', '{"count": "2"}'])
def test_a_record_that_cannot_be_read_is_unknown_not_absent(raw: str) -> None:
    # "absent" would mean "never restarted": restart again (issue 27).
    with pytest.raises(UnknownFact, match="gang-restart record"):
        record({"metadata": {"annotations": {GANG_RESTARTS_ANNOTATION: raw}}})
