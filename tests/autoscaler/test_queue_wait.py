"""``accel_queue_oldest_pending_timestamp_seconds`` (``autoscaler/queues.py``): when
the longest-waiting pending Workload of a ClusterQueue and flavor began to wait,
for the Queues dashboard's wait panel."""

from __future__ import annotations

from datetime import UTC, datetime

from tests.autoscaler.test_kueue_queues import read, rows_of, workload


def at(stamp: str) -> float:
    return datetime.fromisoformat(stamp.replace("Z", "+00:00")).astimezone(UTC).timestamp()


def test_the_oldest_pending_workload_since_creation_or_its_last_requeue() -> None:
    requeued = workload("requeued", 8, created="2026-12-01T08:00:00Z")
    requeued["status"] = {
        "conditions": [
            {
                "type": "Requeued",
                "status": "True",
                "reason": "BackoffFinished",
                "lastTransitionTime": "2026-12-01T11:00:00Z",
            }
        ]
    }
    rows = read(
        [
            workload("held", 16, reserved="h100", admitted=True, created="2026-12-01T07:00:00Z"),
            workload("first", 8, created="2026-12-01T10:00:00Z"),
            workload("second", 8, created="2026-12-01T10:30:00Z"),
            requeued,
        ]
    )
    # h100's 16 are held: the pending ones are given a100, and the requeued one
    # waits since its requeue, not since its creation.
    assert rows_of(rows, "accel_queue_oldest_pending_timestamp_seconds") == {
        ("team-a", "a100"): at("2026-12-01T10:00:00Z")
    }


def test_no_pending_workload_no_series_and_a_bad_time_is_left_out() -> None:
    assert (
        rows_of(
            read([workload("held", 8, reserved="h100", admitted=True)]),
            "accel_queue_oldest_pending_timestamp_seconds",
        )
        == {}
    )
    odd = workload("odd", 8, created="yesterday")
    assert rows_of(read([odd]), "accel_queue_oldest_pending_timestamp_seconds") == {}
    assert rows_of(read([odd]), "accel_queue_workloads")[("team-a", "h100", "pending")] == 1
