"""Prometheus 2.42's own PromQL test suite, run through the built-in evaluator.

The ``.test`` files are Prometheus's ``promql/testdata`` at tag v2.42.0. They
are another project's data, so they are not kept in this tree: they are read
from ``<repo>/../shared/peers/promql/v2.42.0/`` (with the LICENSE, NOTICE and
SOURCE.txt one level up), which CI provides; where that folder is absent the
tests skip and say where they looked. ``conformance.py`` reads and runs them.
Every instant-query case is run; a case is skipped only for a reason in
``SKIP_REASONS``, and each skip is listed. The counts are printed (``-s`` shows
them) and may never get worse than the recorded ones.

The newest upstream files (``../shared/peers/promql/main/``) are run by
``test_upstream.py``, the compliance tester's queries by ``test_compliance.py``.
"""

from __future__ import annotations

from collections import Counter

import pytest

from tests.autoscaler.promql.conformance import NATIVE_HISTOGRAM, run_file
from tests.support.paths import REPO

PEERS = REPO.parent / "shared" / "peers" / "promql"
TESTDATA = PEERS / "v2.42.0"
FILES = sorted(TESTDATA.glob("*.test"))
pytestmark = pytest.mark.skipif(
    not FILES,
    reason=f"Prometheus 2.42's PromQL test files are not in {TESTDATA} (CI puts "
    "prometheus/prometheus promql/testdata at v2.42.0 there; see SOURCE.txt)",
)
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
    assert (PEERS / "NOTICE").is_file() and (PEERS / "LICENSE").is_file()
    assert "v2.42.0" in (PEERS / "SOURCE.txt").read_text()


def test_no_copy_in_the_tree() -> None:
    """The suite is read from ../shared, never copied into the project."""
    here = REPO / "tests"
    assert not [p for p in here.rglob("*.test") if p.read_text().lstrip().startswith("load")]


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
