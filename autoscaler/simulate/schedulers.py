"""The schedulers a scenario can name (``scheduler:``), by name.

A registry of its own, above both ``scheduler.py`` (the hook and ``first-fit``)
and ``placement.py`` (the placement scorer as a scheduler), so that neither has to
import the other.
"""

from __future__ import annotations

from collections.abc import Callable

from autoscaler.simulate.placement import PlacementScheduler
from autoscaler.simulate.scheduler import FirstFit, Scheduler

SCHEDULERS: dict[str, Callable[[], Scheduler]] = {
    "first-fit": FirstFit,
    "placement": PlacementScheduler,
}

__all__ = ["SCHEDULERS"]
