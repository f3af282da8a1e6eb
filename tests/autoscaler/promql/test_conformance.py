"""Prometheus 2.42's own PromQL test suite, run through the built-in evaluator.

The ``.test`` files under ``testdata/prometheus-v2.42.0`` are Prometheus's
``promql/testdata`` at tag v2.42.0 (see the NOTICE there); ``conformance.py``
reads and runs them. Every instant-query case is run; a case is skipped only for
a reason in ``SKIP_REASONS``, and each skip is listed. The counts are printed
(``-s`` shows them) and may never get worse than the recorded ones.
"""

from __future__ import annotations

from collections import Counter
from pathlib import Path

import pytest

from tests.autoscaler.promql.conformance import NATIVE_HISTOGRAM, run_file

TESTDATA = Path(__file__).parent / "testdata" / "prometheus-v2.42.0"
FILES = sorted(TESTDATA.glob("*.test"))
SKIP_REASONS = frozenset({NATIVE_HISTOGRAM})

# Every case agrees: nothing refused, nothing answered differently, nothing skipped
# (2.42's files have no native histograms, and the store keeps staleness markers).
CASES = 566
AGREE = 566
MAX_DISAGREE = 0
MAX_REFUSED = 0


def test_the_suite_is_all_there() -> None:
    names = {p.name for p in FILES}
    assert names == {
        f"{n}.test"
        for n in (
            "aggregators",
            "at_modifier",
            "collision",
            "functions",
            "histograms",
            "literals",
            "operators",
            "selectors",
            "staleness",
            "subquery",
            "trig_functions",
        )
    }
    assert (TESTDATA / "NOTICE").is_file() and (TESTDATA / "LICENSE").is_file()


def test_prometheus_v2_42_suite(capsys: pytest.CaptureFixture[str]) -> None:
    counts: Counter[str] = Counter()
    lines: list[str] = []
    for path in FILES:
        for case, kind, why in run_file(path):
            counts[kind] += 1
            if kind == "skipped":
                assert why in SKIP_REASONS, why
            if kind != "agree":
                lines.append(f"  {kind}: {case.where}: {case.expr}  ({why})")
    summary = (
        f"PromQL 2.42 conformance: {counts['agree']} agree, {counts['disagree']} disagree, "
        f"{counts['refused']} refused, {counts['skipped']} skipped"
    )
    with capsys.disabled():
        print("\n" + summary)
        for line in lines:
            print(line)
    assert sum(counts.values()) == CASES
    assert counts["agree"] >= AGREE, summary
    assert counts["disagree"] <= MAX_DISAGREE, summary
    assert counts["refused"] <= MAX_REFUSED, summary
