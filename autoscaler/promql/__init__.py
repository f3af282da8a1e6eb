"""The built-in PromQL evaluator: the ``scrape`` source's Prometheus.

``SeriesStore`` keeps the series (``store.py``), ``Evaluator`` answers instant
queries over it (``evaluator.py``), ``support.py`` says what is supported before a
rule runs, ``openmetrics.py`` loads series files and ``query.py`` is the CLI.
What it evaluates, it evaluates the way Prometheus 2.42 does: the differential
test (``tests/test_promql_differential.py``) asks a real Prometheus the same
questions over the same data.
"""

from autoscaler.promql.evaluator import EvalError, Evaluator, ExprError
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
