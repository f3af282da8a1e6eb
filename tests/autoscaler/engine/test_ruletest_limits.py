"""Rule unit tests that ask for too much work are refused before they start
(issue 15, "Rule unit tests"): ``accel-autoscaler test`` exits 2 within 10 s and
1 GiB, naming the file, line and column, the limit, and the flag that raises it.

The command runs in a subprocess under ``RLIMIT_AS``: ``0+1x100000000`` used to
allocate a hundred million samples, and ``at: 100000d`` used to evaluate for
ever; a regression fails here instead of exhausting the machine.
"""

from __future__ import annotations

import resource
import subprocess
import sys
import time
from pathlib import Path

import pytest

from autoscaler.ruleset.testfile import count_values, expand_values
from tests.support.paths import FIXTURES, REPO

GIB = 1 << 30
SECONDS = 10.0
RULES = (FIXTURES / "ruletests" / "rules.yaml").resolve()
SERIES = 'accel_up{node="n1",device="nvidia0"}'


def limit_memory() -> None:
    resource.setrlimit(resource.RLIMIT_AS, (GIB, GIB))


def run_test(path: Path, *flags: str) -> tuple[int, str, str, float]:
    start = time.monotonic()
    proc = subprocess.run(
        [sys.executable, "-m", "autoscaler.cli", "test", *flags, str(path)],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=60,
        preexec_fn=limit_memory,
    )
    return proc.returncode, proc.stdout, proc.stderr, time.monotonic() - start


def write_test_file(tmp_path: Path, body: str) -> Path:
    path = tmp_path / "t.yaml"
    path.write_text(f"ruleFiles: [{RULES}]\ntests:\n{body}")
    return path


def one_test(series: str, at: str = "1m") -> str:
    return (
        "  - name: big\n"
        "    interval: 15s\n"
        f"    inputSeries:\n{series}"
        f"    expect:\n      - at: {at}\n        decisions: []\n"
    )


def series_item(values: str, device: str = "nvidia0") -> str:
    return (
        f'      - series: \'accel_up{{node="n1",device="{device}"}}\'\n'
        f"        values: '{values}'\n"
    )


@pytest.mark.parametrize(
    ("values", "col"),
    [("0+1x100000000", 17), ("1 _x" + "9" * 5000, 17), ("0x" + "9" * 5000, 17)],
    ids=["a hundred million samples", "a 5,000-digit gap", "a 5,000-digit repeat"],
)
def test_samples_over_the_limit_are_refused_before_allocation(
    tmp_path: Path, values: str, col: int
) -> None:
    path = write_test_file(tmp_path, one_test(series_item(values)))
    code, out, err, elapsed = run_test(path)
    assert code == 2, (out, err)
    assert "Traceback" not in err
    assert f"{path}:7:{col}: these values expand to" in err, err
    assert "the limit is 200,000" in err and "--max-samples" in err, err
    assert elapsed < SECONDS


def test_an_expected_time_too_far_away_is_refused_before_evaluating(tmp_path: Path) -> None:
    path = write_test_file(tmp_path, one_test(series_item("1x10"), at="100000d"))
    code, out, err, elapsed = run_test(path)
    assert code == 2, (out, err)
    assert f"{path}:9:13: checking 100000d needs 576,000,001 evaluations" in err, err
    assert "--max-evaluations" in err, err
    assert elapsed < SECONDS


def test_twenty_thousand_series_are_refused_before_they_are_read(tmp_path: Path) -> None:
    series = "".join(series_item("1", f"d{i}") for i in range(20_000))
    path = write_test_file(tmp_path, one_test(series))
    code, out, err, elapsed = run_test(path)
    assert code == 2, (out, err)
    assert f"{path}:5:5: this test has 20,000 input series and alerts" in err, err
    assert "the limit is 1,000" in err and "--max-series" in err, err
    assert elapsed < SECONDS


def test_series_times_evaluations_is_bounded_and_each_flag_raises_its_limit(
    tmp_path: Path,
) -> None:
    series = "".join(series_item("1x10", f"d{i}") for i in range(10))
    path = write_test_file(tmp_path, one_test(series, at="10m"))
    code, _, err, _ = run_test(path, "--max-series-evaluations", "100")
    assert code == 2
    assert (
        f"{path}:3:5: test 'big' evaluates 10 series and alerts 41 times (410 in the file so far)"
        in err
    ), err
    assert "--max-series-evaluations" in err
    code, _, err, _ = run_test(path, "--max-evaluations", "40")
    assert "41 evaluations at the interval 15s (41 in the file so far)" in err, err
    assert code == 2 and "--max-evaluations" in err, err
    code, _, err, _ = run_test(path, "--max-samples", "100")
    assert code == 2 and "--max-samples" in err, err
    code, _, err, _ = run_test(path, "--max-series", "9")
    assert code == 2 and "--max-series" in err, err
    code, out, err, _ = run_test(path, "--max-series-evaluations", "410", "--max-samples", "110")
    assert (code, err) == (0, ""), out
    assert out == "1 test passed\n"


def test_a_flag_refuses_what_is_not_a_positive_count(tmp_path: Path) -> None:
    path = write_test_file(tmp_path, one_test(series_item("1")))
    code, _, err, _ = run_test(path, "--max-samples", "0")
    assert code == 2
    assert "--max-samples: must be 1 or more, got 0" in err


def test_non_utf8_and_tags_in_a_test_file_are_problems_at_their_position(tmp_path: Path) -> None:
    path = tmp_path / "t.yaml"
    path.write_bytes(b"ruleFiles: [rules.yaml]\ntests: [{name: caf\xe9}]\n")
    code, _, err, _ = run_test(path)
    assert code == 2
    assert f"{path}:2:19: not UTF-8 text: byte 0xe9" in err, err
    path.write_text("ruleFiles: [rules.yaml]\ntests: !!python/object:os.system []\n")
    code, _, err, _ = run_test(path)
    assert code == 2
    assert f"{path}:2:8:" in err and "Traceback" not in err, err


def test_counting_values_agrees_with_expanding_them() -> None:
    for text in ("1 2 3", "-2+4x3", "1x4", "0x2 1x1", "1 _x3 stale", "_ 1.5e3 -Inf", ""):
        assert count_values(text) == len(expand_values(text)), text
    assert count_values("0+1x" + "9" * 5000) >= 10**15
    with pytest.raises(ValueError, match="bad value"):
        count_values("1x")


def test_a_rule_file_path_too_long_for_the_system_is_a_problem(tmp_path: Path) -> None:
    """Fuzz finding F1, through a test file's ruleFiles."""
    path = tmp_path / "t.yaml"
    path.write_text(
        "ruleFiles: [" + "9" * 5000 + "]\ntests: [{name: x, expect: [{at: 0s, decisions: []}]}]\n"
    )
    code, _, err, _ = run_test(path)
    assert code == 2
    assert "cannot read: File name too long" in err and "Traceback" not in err, err


def test_the_evaluations_of_every_test_in_a_file_count_together(tmp_path: Path) -> None:
    """A thousand tests of a day each would run for hours: the limit is per file."""
    tests = "".join(
        one_test(series_item("1"), at="1d").replace("name: big", f"name: t{i}") for i in range(3)
    )
    path = write_test_file(tmp_path, tests)
    code, _, err, elapsed = run_test(path, "--max-evaluations", "15000")
    assert code == 2
    # 5,761 each at 15s: the third takes the file to 17,283.
    assert f"{path}:25:13: checking 1d needs 5,761 evaluations" in err, err
    assert "(17,283 in the file so far)" in err, err
    assert elapsed < SECONDS
