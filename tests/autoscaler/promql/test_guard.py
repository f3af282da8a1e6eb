"""The parser guard: what used to kill the process with SIGSEGV is refused before
the native parser sees it, and what real rules write still parses."""

from __future__ import annotations

import subprocess
import sys

import pytest

from autoscaler.promql.errors import ExprError
from autoscaler.promql.guard import MAX_DEPTH, MAX_LENGTH, MAX_OPERATORS, limits_problem, parse
from tests.support.paths import REPO

HOSTILE = {
    "nested 12,000 deep": "(" * 12_000 + "x" + ")" * 12_000,
    "a sum of 8,000 terms": "+".join(["x"] * 8_000),
    "5,000 unary minus": "-" * 5_000 + "x",
    "12,000 nested calls": "abs(" * 12_000 + "x" + ")" * 12_000,
    "an 8,000-term and chain": " and ".join(["x"] * 8_000),
}


@pytest.mark.parametrize("expr", list(HOSTILE.values()), ids=list(HOSTILE))
def test_hostile_expressions_are_refused_in_a_process_that_survives(expr: str) -> None:
    # In a child, so that a regression shows as a signal here, not as a dead
    # pytest run.
    code = (
        "import sys\n"
        "from autoscaler.promql.guard import parse\n"
        "from autoscaler.promql.errors import ExprError\n"
        "try:\n"
        "    parse(sys.stdin.read())\n"
        "except ExprError as e:\n"
        "    print(e)\n"
        "    sys.exit(3)\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", code],
        input=expr,
        capture_output=True,
        text=True,
        timeout=30,
        cwd=REPO,
    )
    assert done.returncode == 3, done.stderr[-2000:]
    assert "at most" in done.stdout


def test_each_limit_names_itself() -> None:
    long = "x" + " " * MAX_LENGTH
    assert "characters long" in (limits_problem(long) or "")
    deep = "(" * (MAX_DEPTH + 1) + "x" + ")" * (MAX_DEPTH + 1)
    assert "brackets deep" in (limits_problem(deep) or "")
    wide = "+".join(["x"] * (MAX_OPERATORS + 2))
    assert "operators" in (limits_problem(wide) or "")


@pytest.mark.parametrize(
    "expr",
    [
        "(" * MAX_DEPTH + "x" + ")" * MAX_DEPTH,
        "+".join(["x"] * MAX_OPERATORS),
        # Brackets and operators inside strings, matchers and ranges do not count.
        'sum(rate(x{a="' + "(" * 500 + '", b=~"a-b-c"}[5m])) > 0 and on(n) y',
        'label_replace(x, "dst", "' + "+-*/" * 200 + '", "src", "(.*)")',
        "x # a comment with ((((((( and + - * /\n + 1",
        "rate(x[1h:5m] offset 1d)",
        "1e-5 * x",
    ],
)
def test_what_rules_write_parses(expr: str) -> None:
    assert limits_problem(expr) is None
    parse(expr)


def test_syntax_errors_are_expr_errors() -> None:
    with pytest.raises(ExprError):
        parse("sum(")
    with pytest.raises(ExprError):
        parse('x{a="unterminated')
