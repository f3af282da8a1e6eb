"""The learned rhythm reaches Prometheus: the controller's /metrics carries the
rhythm learner's series with the cluster state (server.py), which is how the
stall rules read them with ``--source prometheus``."""

from __future__ import annotations

from autoscaler.controller import Controller
from autoscaler.rhythm import learner
from autoscaler.server import render_metrics
from tests.autoscaler.controller.test_metrics_endpoint import (  # noqa: F401 (fixture)
    World,
    _samples,
    world,
)


async def test_the_learned_rhythm_is_served_with_the_cluster_state(
    world: tuple[World, Controller],  # noqa: F811 (the fixture)
) -> None:
    w, c = world
    await w.tick(c)
    gang = ("gang", "ml", "llm")
    r = learner(c.state)
    # A dip is a pause once the look after its end finds the job busy still.
    for i, u in enumerate([0.9, 0.01, 0.01, 0.9, 0.9]):
        r.observe(1000.0 + 60 * i, {gang: u}, {gang: 0.0})
    got = {
        (name, labels): v
        for name, labels, v in _samples(render_metrics(c))
        if name.startswith("accel_gang_rhythm_")
    }
    key = (("gang", "llm"), ("namespace", "ml"))
    assert got[("accel_gang_rhythm_pauses", key)] == 1
    assert got[("accel_gang_rhythm_longest_pause_seconds", key)] == 120
    assert got[("accel_gang_rhythm_last_busy_timestamp_seconds", key)] == 1240
