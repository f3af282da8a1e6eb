"""Prometheus's newest PromQL test files, run through the built-in evaluator, with
the split between what we run and what is newer than 2.42 counted and printed.

The files are read from ``<repo>/../shared/peers/promql/main/`` (the commit is in
``SOURCE.txt`` beside them), never copied here; the tests skip, saying where
they looked, where that folder is absent. ``upstream.py`` reads the newer format
and sorts every case into one kind. A case that uses something newer than 2.42
(syntax, native histograms, test-format features) is counted, not failed. For
the recorded commit the counts may not get worse; for another commit (the
folder was refreshed) they are printed and only the invariants hold, so that a
refresh is a number to read, not a red build.
"""

from __future__ import annotations

from collections import Counter

import pytest

from tests.autoscaler.promql.upstream import KINDS, PAST_2_42, run_file
from tests.support.paths import REPO

UPSTREAM = REPO.parent / "shared" / "peers" / "promql" / "main"
FILES = sorted(UPSTREAM.glob("*.test"))
pytestmark = pytest.mark.skipif(
    not FILES,
    reason=f"Prometheus's newest PromQL test files are not in {UPSTREAM} (CI puts "
    "prometheus/prometheus promql/promqltest/testdata there; see ../SOURCE.txt)",
)

RECORDED_COMMIT = "d15adb9ad7e5d9fbde3a9a8f30200593a5a14d86"
CASES = 2214
AGREE = 826
PAST = 897 + 227 + 30  # native histograms, 2.42's parser refuses, test format
MAX_REFUSED = 130
# Answers that changed after 2.42 (3.0's left-open range selectors, type and
# unit labels, names kept by more functions, ...): listed with -s, held here.
MAX_DISAGREE = 104


def _commit() -> str:
    for line in (UPSTREAM.parent / "SOURCE.txt").read_text().splitlines():
        if line.startswith("main:"):
            return line.split("commit", 1)[1].split()[0]
    return ""


def test_newest_upstream_suite(capsys: pytest.CaptureFixture[str]) -> None:
    counts: Counter[str] = Counter()
    per_file: list[str] = []
    disagreements: list[str] = []
    for path in FILES:
        mine: Counter[str] = Counter()
        for case, kind, why in run_file(path):
            assert kind in KINDS, (case.where, kind)
            mine[kind] += 1
            if kind == "disagree":
                disagreements.append(f"  {case.where}: {case.expr}  ({why[:160]})")
        counts += mine
        per_file.append(f"  {path.name}: " + ", ".join(f"{k} {mine[k]}" for k in KINDS if mine[k]))
    past = sum(counts[k] for k in PAST_2_42)
    total = sum(counts.values())
    summary = (
        f"PromQL upstream ({_commit()[:12]}): {total} cases; {past} use features past 2.42 "
        f"(native {counts['native']}, syntax {counts['syntax']}, format {counts['format']}); "
        f"of the rest {counts['agree']} agree, {counts['disagree']} disagree, "
        f"{counts['refused']} refused at load"
    )
    with capsys.disabled():
        print("\n" + summary)
        print("\n".join(per_file))
        print("disagreements (answers that changed after 2.42, or ours to look at):")
        print("\n".join(disagreements))
    # Every case is classified, and most of what 2.42 can express agrees.
    assert total > 1000
    assert counts["agree"] > counts["disagree"] + counts["refused"], summary
    if _commit() == RECORDED_COMMIT:
        assert total == CASES, summary
        assert past == PAST, summary
        assert counts["agree"] >= AGREE, summary
        assert counts["disagree"] <= MAX_DISAGREE, summary
        assert counts["refused"] <= MAX_REFUSED, summary
