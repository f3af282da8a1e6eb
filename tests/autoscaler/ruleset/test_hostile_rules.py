"""Rule files written as an attacker would: each is refused by ``accel-autoscaler
check`` with exit 1 and a ``file:line:col`` problem, within 10 s and 1 GiB of
address space, never a crash, a traceback or a hang (issue 15, "Rule files").

Each case runs the real command in a subprocess under ``RLIMIT_AS``, so a
regression that allocates without bound dies of MemoryError there (and fails
here) instead of taking the test machine with it. PromQL syntax errors are
reported at the bad token's line and column, whatever the scalar style
(issue 20, point 7); those run in-process.
"""

from __future__ import annotations

import resource
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

import pytest

from autoscaler.ruleset.loader import RuleSetError, load_ruleset
from tests.support.paths import REPO

GIB = 1 << 30
# CPU seconds a check may use: about 0.6 here (most of it the interpreter's start),
# 2.6 for 300 broken expressions.
SECONDS = 10.0

HEADER = "apiVersion: accel-fleet/v1\nkind: RuleSet\nspec:\n"


def rule(
    expr: str = "accel_up == 0", target: str = "device", action: str = "{type: cordon}"
) -> str:
    return (
        "  rules:\n"
        "    - name: x\n"
        f"      expr: {expr}\n"
        f"      target: {target}\n"
        f"      action: {action}\n"
    )


def laughs(levels: int = 9) -> str:
    """A "billion laughs" flow mapping: each level is ten aliases of the last."""
    parts = ["a: &a [x, x, x, x, x, x, x, x, x, x]"]
    for i in range(1, levels + 1):
        name, last = chr(97 + i), chr(96 + i)
        parts.append(f"{name}: &{name} [{', '.join([f'*{last}'] * 10)}]")
    return "{" + ", ".join(parts) + "}"


def limit_memory() -> None:
    resource.setrlimit(resource.RLIMIT_AS, (GIB, GIB))


def check(path: Path, *flags: str) -> tuple[int, str, float]:
    """``accel-autoscaler check`` on ``path``: exit code, stderr, and the CPU seconds
    it used. CPU time, not the wall clock, so that other busy processes (parallel
    test workers) do not stretch it; the run's own timeout still ends a hang."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    proc = subprocess.run(
        [sys.executable, "-m", "autoscaler.cli", "check", *flags, str(path)],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=60,
        preexec_fn=limit_memory,
    )
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    used = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    return proc.returncode, proc.stderr, used


def deep_promql(depth: int) -> str:
    return "(" * depth + "accel_up" + ")" * depth + " == 0"


def long_sum(terms: int, name: str = "accel_up") -> str:
    return " + ".join([name] * terms) + " == 0"


# (case, file text, line of the problem, what the problem says)
CASES: list[tuple[str, Callable[[], str], int, str]] = [
    (
        "PromQL nested 12,000 deep (SIGSEGV in the parser library)",
        lambda: HEADER + rule(expr=deep_promql(12_000)),
        6,
        "at most 16384 are allowed",
    ),
    (
        "PromQL nested 5,000 deep, at the bracket past the limit",
        lambda: HEADER + rule(expr=deep_promql(5_000)),
        6,
        "6:77: expr: invalid PromQL at '(': the expression nests more than 64 brackets",
    ),
    (
        "a sum of 8,000 terms (SIGABRT in the parser library)",
        lambda: HEADER + rule(expr=long_sum(8_000)),
        6,
        "at most 16384 are allowed",
    ),
    (
        "a sum of 1,500 terms (RecursionError)",
        lambda: HEADER + rule(expr=long_sum(1_500, "x")),
        6,
        "more than 256 operators",
    ),
    (
        "an alias bomb in target",
        lambda: HEADER + rule(target=laughs()),
        7,
        "aliases expand to more than 10000 nodes",
    ),
    (
        "an alias bomb in breakerReset",
        lambda: HEADER + f"  limits:\n    breakerReset: {laughs()}\n" + rule(),
        5,
        "aliases expand to more than 10000 nodes",
    ),
    (
        "an alias bomb in an action parameter",
        lambda: HEADER + rule(action="{type: taint, taint: " + laughs() + "}"),
        8,
        "aliases expand to more than 10000 nodes",
    ),
    (
        "a recursive alias",
        lambda: HEADER + rule(action="&a {type: cordon, again: *a}"),
        8,
        "is inside the node it refers to",
    ),
    (
        "a 5,000-digit integer",
        lambda: HEADER + f"  limits:\n    maxConcurrentDrains: {'9' * 5000}\n" + rule(),
        5,
        "out of range",
    ),
    (
        "a 5,000-digit integer in an action parameter",
        lambda: (
            HEADER
            + rule(target="node", action="{type: drain, gracePeriodSeconds: " + "9" * 5000 + "}")
            + "      recover: {expr: accel_up == 1}\n"
        ),
        8,
        "an integer of 5000 characters is out of range",
    ),
    (
        "a 5,000-digit duration in an action parameter",
        lambda: (
            HEADER
            + rule(target="node", action="{type: drain, drainTimeout: " + "9" * 5000 + "s}")
            + "      recover: {expr: accel_up == 1}\n"
        ),
        8,
        "out of range",
    ),
    (
        "a 5,000-digit duration",
        lambda: HEADER + rule() + f"      cooldown: {'9' * 5000}s\n",
        9,
        "out of range",
    ),
    (
        "YAML nested 5,000 deep (flow)",
        lambda: HEADER + rule(action="[" * 5000 + "]" * 5000),
        8,
        "nested more than 64 levels deep",
    ),
    (
        "YAML nested 100 deep (flow)",
        lambda: HEADER + rule(action="[" * 100 + "]" * 100),
        8,
        "8:75: nested more than 64 levels deep",
    ),
    (
        "YAML nested 5,000 deep (block)",
        lambda: HEADER + rule(action="\n" + "        " + "- " * 5000 + "x"),
        9,
        "nested more than 64 levels deep",
    ),
    (
        "an evaluationInterval of 2h",
        lambda: HEADER + "  evaluationInterval: 2h\n" + rule(),
        4,
        "evaluationInterval must be from 1s to 1h, got '2h'",
    ),
    (
        "an evaluationInterval of 1e400s (infinity)",
        lambda: HEADER + "  evaluationInterval: 1e400s\n" + rule(),
        4,
        "evaluationInterval: invalid duration '1e400s'",
    ),
    (
        "an evaluationInterval of 1.0e+400 (a YAML float, infinity)",
        lambda: HEADER + "  evaluationInterval: 1.0e+400\n" + rule(),
        4,
        "too large to be a number",
    ),
    (
        "a !!python tag",
        lambda: HEADER + rule(target="!!python/object/apply:os.system [echo]"),
        7,
        "could not determine a constructor for the tag",
    ),
    (
        "for: of a thousand years",
        lambda: HEADER + rule() + "      for: 1000y\n",
        9,
        "out of range",
    ),
    (
        "maxUnhealthyNodes of 5,000 digits as a string",
        lambda: HEADER + f"  limits:\n    maxUnhealthyNodes: '{'9' * 5000}'\n" + rule(),
        5,
        "maxUnhealthyNodes must be a whole number of nodes from 0 to 100000",
    ),
]


@pytest.mark.parametrize(
    ("make", "line", "needle"),
    [pytest.param(make, line, needle, id=case) for case, make, line, needle in CASES],
)
def test_check_refuses_hostile_rules_quickly_and_small(
    tmp_path: Path, make: Callable[[], str], line: int, needle: str
) -> None:
    path = tmp_path / "f.yaml"
    path.write_text(make())
    code, err, cpu = check(path)
    assert code == 1, err
    assert "Traceback" not in err, err
    assert f"{path}:{line}:" in err, err
    assert needle in err, err
    assert cpu < SECONDS, cpu


def test_non_utf8_is_refused_at_the_bad_byte(tmp_path: Path) -> None:
    path = tmp_path / "f.yaml"
    path.write_bytes((HEADER + rule()).encode() + b"      description: caf\xe9\n")
    code, err, _ = check(path)
    assert code == 1, err
    assert f"{path}:9:23: not UTF-8 text: byte 0xe9" in err, err


def test_a_file_over_the_size_limit_is_refused_before_it_is_read(tmp_path: Path) -> None:
    path = tmp_path / "f.yaml"
    path.write_text(HEADER + rule() + "#" * (5 * 1024 * 1024) + "\n")
    code, err, cpu = check(path)
    assert code == 1, err
    assert f"{path}: larger than 4194304 bytes" in err, err
    assert cpu < SECONDS, cpu


def test_every_problem_of_a_hostile_file_is_reported_at_once(tmp_path: Path) -> None:
    path = tmp_path / "f.yaml"
    path.write_text(
        HEADER
        + "  evaluationInterval: 0s\n"
        + rule(expr=deep_promql(100))
        + f"      cooldown: {'9' * 30}s\n"
    )
    code, err, _ = check(path)
    assert code == 1
    lines = err.strip().splitlines()
    assert [line.split(" ", 1)[0] for line in lines] == [
        f"{path}:4:23:",
        f"{path}:7:77:",
        f"{path}:10:17:",
    ], err


# --- PromQL syntax errors at the bad token (issue 20, point 7) -----------------------


def problems(tmp_path: Path, text: str) -> list[str]:
    path = tmp_path / "f.yaml"
    path.write_text(text)
    with pytest.raises(RuleSetError) as info:
        load_ruleset([path])
    return [str(p).replace(str(path), "f.yaml") for p in info.value.problems]


@pytest.mark.parametrize(
    ("expr_lines", "where", "token"),
    [
        # (the expr key and its value as written, line:col of the bad token, token)
        ("      expr: accel_up == = 0\n", "6:25", "'='"),
        ("      expr: 'accel_up{device=''a''} >> 0'\n", "6:38", "'>'"),
        ('      expr: "accel_up{device=\\"a\\"} >> 0"\n', "6:38", "'>'"),
        (
            "      expr: |\n        sum by (node) (\n          accel_up\n        ) > > 0\n",
            "9:13",
            "'>'",
        ),
        (
            "      expr: >\n        sum by (node) (accel_up)\n        > on (node) bogus * * 2\n",
            "8:29",
            "'*'",
        ),
        (
            "      expr: sum by (node)\n        (accel_up) >\n        > 0\n",
            "8:9",
            "'>'",
        ),
        ("      expr: abs(accel_up, 1) > 0\n", "6:13", "'abs'"),
        ("      expr: max_over_time(accel_up[5m] > 0\n", "6:26", "'('"),
    ],
)
def test_a_promql_syntax_error_is_reported_at_its_token(
    tmp_path: Path, expr_lines: str, where: str, token: str
) -> None:
    text = (
        HEADER
        + "  rules:\n    - name: x\n"
        + expr_lines
        + ("      target: device\n      action: {type: cordon}\n")
    )
    got = problems(tmp_path, text)
    assert len(got) == 1, got
    assert got[0].startswith(f"f.yaml:{where}: expr: invalid PromQL at {token}"), got


def test_an_unfinished_expression_is_reported_at_its_end(tmp_path: Path) -> None:
    got = problems(tmp_path, HEADER + rule(expr="sum(accel_up) by"))
    assert got == [
        "f.yaml:6:29: expr: invalid PromQL at the end of the expression: invalid promql query"
    ]


def test_many_broken_expressions_stay_fast(tmp_path: Path) -> None:
    """Locating costs parses, so only the first few errors of a file are located;
    a file of a thousand broken long expressions is still checked in seconds."""
    expr = " + ".join(["accel_up"] * 200) + " > > 0"
    rules = "".join(
        f"    - {{name: r{i}, expr: '{expr}', target: device, action: {{type: cordon}}}}\n"
        for i in range(300)
    )
    path = tmp_path / "f.yaml"
    path.write_text(HEADER + "  rules:\n" + rules)
    code, err, cpu = check(path)
    assert code == 1
    assert err.count("invalid PromQL") == 300
    assert cpu < SECONDS, cpu


@pytest.mark.parametrize("source", ["prometheus", "scrape"])
@pytest.mark.parametrize(
    "expr",
    [
        " and ".join(["accel_up"] * 250),
        " + ".join(["accel_up"] * 250) + " > 0",
        "(" * 63 + "accel_up" + ")" * 63 + " == 0",
        "sum by (node) (" * 60 + "accel_up" + ")" * 60 + " > 0",
    ],
    ids=["250 and", "250 +", "63 deep", "60 aggregations"],
)
def test_the_largest_expressions_allowed_load_in_a_second(
    tmp_path: Path, expr: str, source: str
) -> None:
    path = tmp_path / "f.yaml"
    path.write_text(HEADER + rule(expr=f"'{expr}'", target="node"))
    # CPU seconds this process spent (under a tenth of one here; the load runs on
    # this thread), which other busy processes do not stretch as they do the wall clock;
    # a parse whose cost blows up with the length or depth of these is far past it.
    start = time.process_time()
    assert len(load_ruleset([path], source=source).rules) == 1
    worked = time.process_time() - start
    assert worked < 1.0, worked


def test_a_path_too_long_for_the_system_is_a_problem(tmp_path: Path) -> None:
    """Fuzz finding F1: pathlib lets ENAMETOOLONG through ``is_dir()``."""
    with pytest.raises(RuleSetError) as info:
        load_ruleset(["9" * 5000])
    assert [p.message for p in info.value.problems] == ["cannot read: File name too long"]
    assert str(info.value) == "9" * 5000 + ": cannot read: File name too long"
