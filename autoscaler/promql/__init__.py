"""The built-in PromQL evaluator: the ``scrape`` source's Prometheus.

``SeriesStore`` keeps the series (``store.py``; each metric name's series in a
columnar ``Family``, ``family.py``; label values interned in ``symbols.py``).
``Evaluator`` answers instant queries over it (``evaluator.py``), on expressions
read as PromQL 2.42 (``dialect.py``) and compiled into plans (``plans.py``), with
instant vectors as label code columns (``vectors.py``), binary operators and vector
matching in ``binops.py``, aggregations in ``aggregations.py``, range functions in
``functions.py`` and ``over_time.py`` (over range selectors and subqueries alike,
``subquery.py``), functions of instant vectors in ``instant_functions.py``,
``histogram_quantile`` in ``histogram.py`` and its errors in ``errors.py``.
``support.py`` says what is supported before a rule runs, ``openmetrics.py`` loads
series files and ``query.py`` writes a result as Prometheus's HTTP API does.
What it evaluates, it evaluates the way Prometheus 2.42 does: the differential
test (``tests/integration/test_promql_differential.py``) asks a real Prometheus the same
questions over the same data.
"""

from autoscaler.promql.errors import EvalError, ExprError
from autoscaler.promql.evaluator import Evaluator
from autoscaler.promql.store import ExpositionError, SeriesStore
from autoscaler.promql.support import parse_error, required_retention, unsupported

__all__ = [
    "EvalError",
    "Evaluator",
    "ExpositionError",
    "ExprError",
    "SeriesStore",
    "parse_error",
    "required_retention",
    "unsupported",
]
