"""A source over an in-memory series store and the built-in evaluator.

Three things hold their series in memory and ask the built-in evaluator: the
``scrape`` source (filled by HTTP scrapes), the fleet simulator (filled by its
telemetry) and the rule unit tests (filled from a test file's input series). They
answer queries the same way, from this one class, so that a rule decides the same
thing in all three for the same samples:

- an evaluation error is ``Unknown`` with the reason, never an exception and
  never an empty vector;
- a range vector is ``Unknown``: a rule's condition is an instant vector;
- ``query_targets`` cuts a result down to some targets before the evaluator
  decodes it, which the evaluation cycle uses for a rule's recover condition
  (``engine/cycle.py``): at 8,000 devices a result such as ``accel_up == 1`` costs
  more to decode than to evaluate.

Subclasses decide what ``refresh`` does (scrape, simulate, nothing).
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Iterable, Sequence

from autoscaler.promql.errors import EvalError, ExprError
from autoscaler.promql.evaluator import Columns, Evaluator
from autoscaler.promql.store import SeriesStore
from autoscaler.promql.support import LOOKBACK_DELTA, retention_by_name
from autoscaler.types import Matrix, QueryResult, Unknown

log = logging.getLogger("accel_autoscaler.sources.store")


class StoreSource:
    """A ``Source`` (``sources/base.py``) over ``store``. ``refresh`` reports the
    source healthy; ``threaded`` runs each evaluation in a thread, for a server
    whose event loop must keep answering while a large fleet is evaluated."""

    name = "store"

    def __init__(
        self,
        store: SeriesStore | None = None,
        *,
        lookback_delta: float = LOOKBACK_DELTA,
        threaded: bool = False,
        retention_floor: float = 0.0,
    ) -> None:
        self.store = store if store is not None else SeriesStore()
        self.evaluator = Evaluator(self.store, lookback_delta=lookback_delta)
        self.threaded = threaded
        self.retention_floor = retention_floor
        self._needs: dict[str, float] = {}
        """What ``retain``'s expressions read of each metric (``retention_by_name``)."""
        self._floors: dict[str, float] = {}
        """The same for ``keep_at_least``'s, which a later ``retain`` keeps."""

    def retain(self, exprs: Sequence[str]) -> None:
        """Keeps exactly the history the rules need (their longest range, offset and
        the lookback), at least ``retention_floor`` seconds, so memory follows the
        rules, not the uptime; of each metric they read, what they read of it
        (``SeriesStore.kept_by_name``)."""
        if exprs:
            self._needs = _reach(exprs)
            self._keep()

    def keep_at_least(self, exprs: Sequence[str]) -> None:
        """Raises the retention (and its floor, which ``retain`` keeps) to what
        ``exprs`` need, never lowers it: for a reader such as placement that asks
        its own queries of a source whose rules set the retention."""
        if exprs:
            reach = _reach(exprs)
            self.retention_floor = max(self.retention_floor, max(reach.values()))
            self._floors = _merged(self._floors, reach)
            self._keep()

    def _keep(self) -> None:
        """The store's retention and each metric's from the two tables: a metric
        named in neither keeps the whole retention, and an expression that names
        no metric (``""``) reads every one."""
        needs = _merged(self._needs, self._floors)
        every = needs.pop("", 0.0)
        whole = max(max(needs.values(), default=0.0), every)
        if not self._needs:
            # Only ``keep_at_least``: no rules said what is read, so every metric
            # keeps the whole retention, which is never lowered.
            self.store.retention = max(self.store.retention, whole)
            return
        self.store.retention = max(whole, self.retention_floor)
        self.store.kept_by_name = {name: max(need, every) for name, need in needs.items()}

    async def refresh(self, at: float) -> bool:
        return True

    async def query(self, expr: str, at: float) -> QueryResult:
        return await self._answer(expr, at, None)

    async def query_targets(
        self, expr: str, at: float, names: tuple[str, ...], targets: Iterable[tuple[str, ...]]
    ) -> QueryResult:
        """``query``, keeping only the samples whose ``names`` labels have one of the
        value tuples in ``targets``."""
        return await self._answer(expr, at, (names, targets))

    async def query_columns(
        self, expr: str, at: float, names: tuple[str, ...]
    ) -> Columns | Unknown:
        """``query``'s result as the code columns of ``names`` and the values
        (``Evaluator.columns``): no ``Sample`` is built."""
        try:
            if self.threaded:
                return await asyncio.to_thread(self.evaluator.columns, expr, at, names)
            return self.evaluator.columns(expr, at, names)
        except (EvalError, ExprError) as e:
            return Unknown(f"evaluation failed: {e}")

    async def _answer(
        self,
        expr: str,
        at: float,
        only: tuple[tuple[str, ...], Iterable[tuple[str, ...]]] | None,
    ) -> QueryResult:
        try:
            start = time.perf_counter()
            if self.threaded:
                result = await asyncio.to_thread(self.evaluator.instant, expr, at, only=only)
            else:
                result = self.evaluator.instant(expr, at, only=only)
            log.debug("evaluated %r in %.1f ms", expr, (time.perf_counter() - start) * 1e3)
        except EvalError as e:
            return Unknown(f"evaluation failed: {e}")
        if isinstance(result, Matrix):
            return Unknown("a rule must yield an instant vector, not a range vector")
        return result

    async def close(self) -> None:
        return None


def _reach(exprs: Sequence[str]) -> dict[str, float]:
    """Seconds of each metric's history ``exprs`` read (``retention_by_name``)."""
    out: dict[str, float] = {}
    for e in exprs:
        out = _merged(out, retention_by_name(e))
    return out


def _merged(a: dict[str, float], b: dict[str, float]) -> dict[str, float]:
    """Each name's larger need of the two."""
    out = dict(a)
    for name, need in b.items():
        out[name] = max(out.get(name, 0.0), need)
    return out
