"""Checkpoints as jobs really take them: how long each pause lasts, and whether the
job says so.

Why a module of its own: the stall rules' worst confounder is a checkpoint pause
(every device of a gang idle together for minutes), and the simulator's verdict on
them is only fair if the pauses look like real ones. Two shortcuts made them
easy: every gang carried the three checkpoint annotations
(``accel-fleet.io/checkpoint-interval``, ``checkpoint-pause``,
``last-checkpoint``), which no training framework writes by itself, and every
pause lasted exactly ``checkpointPause``, where a real write varies with storage
load. Here:

- **Who declares** (``workload.declares``, a share from 0 to 1, default 0): each
  job is drawn once, at submission, to declare or not, from a stream of its own
  (so the arrivals, jobs and faults are those of the same scenario without
  ``declares``). A declaring gang's pods carry the three annotations; one that
  does not still checkpoints on the same rhythm (its devices idle through each
  pause), but writes none of them, so the rules know nothing of its pauses.
- **How long a pause lasts** (``checkpointPause``): a plain duration is every
  pause (``PauseSpec`` with ``sigma`` 0); ``{median: 2m, sigma: 0.5}`` draws each
  pause from a lognormal of that median. The draw is made once per checkpoint (a
  gang plans its next pause several times: after a restore, at the pause's start)
  from the gang's own stream, keyed by the run's seed and the job's index, so two
  runs of one scenario with different rules give the same gang the same pauses in
  the same order. A draw is capped at ``MAX_PAUSE_SHARE`` of the interval (the
  pause is the end of the interval's work). The ``checkpoint-pause`` annotation
  of a declaring gang says the median, which is what a user would write: the real
  pauses exceed it about half the time (the rules' margin has to cover that).

Single-pod batch Jobs save progress every ``checkpointInterval`` as before, with
no pause and no annotations; ``declares`` is drawn for them too, so that the
stream stays aligned whatever the job sizes.
"""

from __future__ import annotations

import math

import numpy as np

from accel_common.names import (
    CHECKPOINT_INTERVAL_ANNOTATION,
    CHECKPOINT_PAUSE_ANNOTATION,
    LAST_CHECKPOINT_ANNOTATION,
)
from autoscaler.simulate.jobstate import Gang, Job
from autoscaler.simulate.scenario_workload import PauseSpec

# No drawn pause takes more than this share of its checkpoint interval.
MAX_PAUSE_SHARE = 0.9
# Where this module's streams hang below the job stream's seed (arbitrary, fixed).
_DECLARES_KEY = 30
_PAUSES_KEY = 31


def _duration(seconds: float) -> str:
    return f"{int(seconds)}s"


class Checkpoints:
    """Per job: whether it declares its checkpoints; per checkpoint of a gang: how
    long its pause lasts. ``seed``: the job stream's seed, below which this
    module's streams are keyed (see the module docstring)."""

    def __init__(
        self, interval: float, pause: PauseSpec, share: float, seed: np.random.SeedSequence
    ) -> None:
        self.interval = interval
        self.spec = pause
        self.share = share
        self._seed = seed
        self._declares = np.random.default_rng(self._child(_DECLARES_KEY))
        self._streams: dict[int, np.random.Generator] = {}

    def _child(self, *key: int) -> np.random.SeedSequence:
        s = self._seed
        return np.random.SeedSequence(s.entropy, spawn_key=(*s.spawn_key, *key))

    def draw_declares(self, job: Job) -> None:
        """Whether ``job`` declares its checkpoints: one draw per job, always."""
        job.declares = bool(self._declares.random() < self.share)

    def declared_pause(self, job: Job) -> float:
        """The pause its pods declare (the median); 0 where it declares none."""
        return self.spec.median if job.declares else 0.0

    def pause(self, g: Gang, boundary: float) -> float:
        """The pause before the checkpoint at ``boundary`` (work), drawn once."""
        if self.spec.sigma <= 0 or self.spec.median <= 0:
            return self.spec.median
        if g.pause_for is not None and g.pause_for[0] == boundary:
            return g.pause_for[1]
        rng = self._streams.get(g.index)
        if rng is None:
            rng = self._streams[g.index] = np.random.default_rng(self._child(_PAUSES_KEY, g.index))
        drawn = self.spec.median * math.exp(self.spec.sigma * float(rng.standard_normal()))
        value = min(drawn, MAX_PAUSE_SHARE * self.interval)
        g.pause_for = (boundary, value)
        g.pauses.append(value)
        return value

    def annotations(self, job: Job, saved: str | None) -> dict[str, str]:
        """The checkpoint annotations of a declaring job's pods (none otherwise);
        ``saved``: its last checkpoint as an RFC 3339 time, if any."""
        if not job.declares:
            return {}
        out: dict[str, str] = {}
        if self.interval > 0:
            out[CHECKPOINT_INTERVAL_ANNOTATION] = _duration(self.interval)
        if self.spec.median > 0:
            out[CHECKPOINT_PAUSE_ANNOTATION] = _duration(self.spec.median)
        if saved is not None:
            out[LAST_CHECKPOINT_ANNOTATION] = saved
        return out


__all__ = ["MAX_PAUSE_SHARE", "Checkpoints"]
