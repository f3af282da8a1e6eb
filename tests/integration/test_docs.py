"""The documentation site (mkdocs.yml, docs/) stays true: its metric table is the
catalogue's, every flag that --help shows is documented, the examples load and
pass, every relative link and anchor in the README and the docs resolves, the
action parameter tables and every list of actions come from the action registry,
the design page's code table names every package and module there is, the paths
and dotted names that pages and docstrings point to exist, and the site builds
with ``mkdocs build --strict``."""

from __future__ import annotations

import argparse
import ast
import dataclasses
import functools
import importlib
import importlib.util
import re
import shutil
import subprocess
import sys
import unicodedata
from pathlib import Path
from types import ModuleType

import pytest

from autoscaler.actions import ACTIONS
from autoscaler.engine.breaker import UNHEALTHY_ACTIONS
from exporter import schema
from exporter.cli import build_parser
from tests.support.paths import REPO

DOCS = REPO / "docs"
PAGES = sorted(DOCS.rglob("*.md"))
HOOK_PATH = DOCS / "hooks" / "action_tables.py"
# The Python packages whose every module the design page's code table names.
CODE_ROOTS = ("accel_common", "exporter", "autoscaler", "nodeagent")

# Sentences that were true once and are not any more, and links out of the repository.
STALE = (
    "arrive with their own issue",
    "For now it records its decisions",
    "shared/DESIGN.md",
    "The design document's",
)


def page(relative: str) -> str:
    return (DOCS / relative).read_text()


@functools.cache
def load_hook() -> ModuleType:
    """The mkdocs hook, loaded from its path the way mkdocs loads it."""
    spec = importlib.util.spec_from_file_location("action_tables", HOOK_PATH)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def rendered(path: Path) -> str:
    """A page's Markdown as mkdocs renders it: after the hook."""
    text = path.read_text()
    if path.is_relative_to(DOCS):
        text = str(load_hook().on_page_markdown(text))
    return text


def documented_flags(text: str) -> set[str]:
    return set(re.findall(r"`(--[a-z.-]+)`", text))


def subcommands() -> dict[str, argparse.ArgumentParser]:
    from autoscaler.cli import build_parser as autoscaler_parser

    sub = next(a for a in autoscaler_parser()._actions if isinstance(a, argparse._SubParsersAction))
    return dict(sub.choices)


def long_flags(parser: argparse.ArgumentParser) -> set[str]:
    return {
        opt
        for action in parser._actions
        for opt in action.option_strings
        if opt.startswith("--") and opt != "--help"
    }


# --- what the pages say matches the code --------------------------------------------


def test_metric_table_is_the_catalogue() -> None:
    assert schema.markdown_table() in page("exporter/metrics.md")


def test_every_flag_is_documented() -> None:
    assert long_flags(build_parser()) - documented_flags(page("exporter/index.md")) == set()


def test_every_node_agent_flag_is_documented() -> None:
    from nodeagent.cli import parser as agent_parser

    assert long_flags(agent_parser()) - documented_flags(page("agent.md")) == set()


def test_every_autoscaler_run_flag_is_documented() -> None:
    run = subcommands()["run"]
    assert long_flags(run) - documented_flags(page("controller.md")) == set()


def test_every_autoscaler_subcommand_flag_is_mentioned() -> None:
    site = "\n".join(p.read_text() for p in PAGES)
    mentioned = set(re.findall(r"(--[a-z][a-z.-]*)", site))
    missing = {
        name: sorted(long_flags(parser) - mentioned) for name, parser in subcommands().items()
    }
    assert {name: flags for name, flags in missing.items() if flags} == {}


def test_the_rule_example_loads(tmp_path: Path) -> None:
    from autoscaler.ruleset.loader import load_ruleset

    section = page("rules.md").split("## The RuleSet format", 1)[1]
    example = section.split("```yaml\n", 1)[1].split("```", 1)[0]
    path = tmp_path / "example.yaml"
    path.write_text(example)
    ruleset = load_ruleset([path], source="scrape")
    assert [r.name for r in ruleset.rules] == ["fatal-device-fault", "gpu-fault-alert"]


def test_the_rule_unit_test_example_passes(tmp_path: Path) -> None:
    """The example names ``../remediation.yaml``, as a file in rules/tests/ does."""
    from autoscaler.engine.ruletest import run_file

    section = page("rules.md").split("## Rule unit tests", 1)[1]
    example = section.split("```yaml\n", 1)[1].split("```", 1)[0]
    shutil.copy(REPO / "rules" / "remediation.yaml", tmp_path / "remediation.yaml")
    (tmp_path / "tests").mkdir()
    path = tmp_path / "tests" / "example_test.yaml"
    path.write_text(example)
    result = run_file(path)
    assert (result.passed, result.failures, result.problems) == (1, (), ())


# --- the action tables come from the actions -----------------------------------------


def test_the_actions_page_asks_for_the_generated_tables() -> None:
    hook = load_hook()
    text = page("actions.md")
    assert hook.MARKER in text
    # No hand-written parameter table that would drift beside the generated one.
    assert "| parameter |" not in text


def test_the_action_tables_are_current() -> None:
    """Each action's section names its targets, and one row per parameter with the
    default its validation fills in; the docstring table it takes the meanings from
    has exactly the spec's parameters and the spec's defaults."""
    hook = load_hook()
    built = rendered(DOCS / "actions.md")
    for name, spec in ACTIONS.items():
        section = built.split(f"### `{name}`\n", 1)[1].split("\n### ", 1)[0].split("\n## ")[0]
        for target in spec.targets:
            assert f"`{target}`" in section.splitlines()[1]
        rows = {
            m.group(1): m.group(3)
            for m in re.finditer(r"^\| `([^`]+)` \| ([^|]+) \| ([^|]+) \|", section, re.M)
        }
        kinds = {
            m.group(1): m.group(2)
            for m in re.finditer(r"^\| `([^`]+)` \| ([^|]+) \|", section, re.M)
        }
        assert list(rows) == list(spec.keys), name
        defaults, problems = spec.validate({})
        required = {p.param for p in problems}
        docs = hook.docstring_rows(spec)
        assert set(docs) == set(spec.keys), f"{name}: docstring table rows {sorted(docs)}"
        for key in spec.keys:
            value = defaults[key]
            if key in required:
                assert rows[key] == "required"
                continue
            if value is None:
                assert rows[key] == (docs[key].default or "unset")
                continue
            cell = rows[key].strip("`")
            if isinstance(value, bool):
                assert cell == str(value).lower()
            elif isinstance(value, float) and kinds[key].startswith("duration"):
                assert cell == hook.format_duration(value)
            else:
                assert cell == (f"{value:g}" if isinstance(value, float) else str(value))
            # The docstring's own default column says the same.
            assert re.sub(r"[`\s]", "", docs[key].default) == cell, (name, key)


def test_format_duration() -> None:
    hook = load_hook()
    cases = {
        0: "0s",
        60: "1m",
        600: "10m",
        1800: "30m",
        5400: "1h30m",
        90000: "1d1h",
        1.5: "1s500ms",
    }
    assert {s: hook.format_duration(float(s)) for s in cases} == cases


# --- every list of actions is the registry --------------------------------------------

ACTION_NAME = "(?:" + "|".join(ACTIONS) + ")"
# Backticked action names joined by commas, "and" or "or": a list of actions.
ACTION_RUN = re.compile(rf"`{ACTION_NAME}`(?:(?:,\s+|,?\s+and\s+|,?\s+or\s+)`{ACTION_NAME}`)+")


def action_runs(text: str) -> list[list[str]]:
    return [re.findall(r"`([^`]+)`", m.group(0)) for m in ACTION_RUN.finditer(text)]


def test_the_actions_page_lists_every_action_from_the_registry() -> None:
    """The summary table is generated: one row per registered action, in the
    registry's order, with the spec's targets and undo, and the first paragraph of
    the action's own docstring."""
    hook = load_hook()
    assert hook.SUMMARY_MARKER in page("actions.md")
    built = rendered(DOCS / "actions.md")
    table = built.split("| action | targets | a `recover` undoes it | what it does |", 1)[1]
    rows = re.findall(r"^\| \[`([^`]+)`\]\(#\1\) \| ([^|]+) \| (yes|no) \| (.+) \|$", table, re.M)
    assert [row[0] for row in rows] == list(ACTIONS)
    for name, targets, undo, does in rows:
        spec = ACTIONS[name]
        assert (targets, undo == "yes") == (", ".join(spec.targets), spec.reversible), name
        assert does == hook.summary(spec) and len(does) > 10, name


def test_a_docstring_that_does_not_open_with_its_action_stops_the_build() -> None:
    """``base`` is a shared module, not an action: its docstring does not open with
    an action's name, which is what a new action's missing summary looks like."""
    spec = dataclasses.replace(ACTIONS["cordon"], name="base")
    with pytest.raises(ValueError, match=r"autoscaler/actions/base\.py: the module docstring"):
        load_hook().summary(spec)


def test_the_action_name_selections_are_the_code_s() -> None:
    """Each selection a page may ask for is the fact the code acts on, in the
    registry's order; the breaker's list names only registered actions."""
    hook = load_hook()
    assert set(ACTIONS) >= UNHEALTHY_ACTIONS, sorted(UNHEALTHY_ACTIONS - set(ACTIONS))
    expected = {
        "all": list(ACTIONS),
        "reversible": [n for n, s in ACTIONS.items() if s.reversible],
        "irreversible": [n for n, s in ACTIONS.items() if not s.reversible],
        "breaker": [n for n in ACTIONS if n in UNHEALTHY_ACTIONS],
    }
    assert set(hook.SELECTIONS) == set(expected)
    for selection, names in expected.items():
        phrase = hook.action_names(selection)
        assert action_runs(phrase) == [names], selection
        assert phrase.endswith(f" and `{names[-1]}`"), phrase
    with pytest.raises(ValueError, match="no such selection; use one of all, reversible"):
        hook.action_names("destructive")
    marker = "Only <!-- action-names: irreversible --> may repeat."
    assert hook.on_page_markdown(marker) == f"Only {hook.action_names('irreversible')} may repeat."


def test_no_page_lists_actions_by_hand() -> None:
    """A list of five or more actions written out is the whole registry, in its
    order: a partial list by hand goes stale when an action is added, so a page
    asks the hook for it (``<!-- action-names: ... -->``). Shorter runs name the
    actions a sentence is about (the four a benchmark times)."""
    stale = {
        path.relative_to(REPO).as_posix(): run
        for path in [REPO / "README.md", *PAGES]
        for run in action_runs(path.read_text())
        if len(run) >= 5 and run != list(ACTIONS)
    }
    assert stale == {}


def test_the_readme_and_the_design_page_name_every_action() -> None:
    """The README is read on the forge, not built, so its list is checked here; the
    design page's is generated."""
    assert list(ACTIONS) in action_runs((REPO / "README.md").read_text())
    design = rendered(DOCS / "design.md").split("- **Actions**", 1)[1].split("\n- **", 1)[0]
    assert action_runs(design) == [list(ACTIONS)]
    assert list(ACTIONS) in action_runs(rendered(DOCS / "index.md"))


def test_every_table_of_actions_has_a_row_for_each_action() -> None:
    """A table whose first column is "action" (the summary, the RBAC table) has a
    row for every registered action."""
    for path in [REPO / "README.md", *PAGES]:
        text = rendered(path)
        for table in re.findall(r"^\| action \|.*?(?=\n\n|\Z)", text, re.M | re.S):
            first = {m.group(1) for m in re.finditer(r"^\| \[?`([a-z_]+)`", table, re.M)}
            missing = [name for name in ACTIONS if name not in first]
            assert missing == [], f"{path.relative_to(REPO)}: {missing}"


# --- the design page's code table ------------------------------------------------------


def code_table() -> list[tuple[list[str], str]]:
    """design.md's "Where code goes" rows: the paths of the first column (a bare file
    name after a file is in that file's directory: `autoscaler/decision.py`,
    `types.py`) and the text of the second."""
    section = page("design.md").split("\n## Where code goes\n", 1)[1].split("\n## ", 1)[0]
    rows = []
    for line in section.splitlines():
        if not line.startswith("| `"):
            continue
        cell, holds = line[1:].split("|", 2)[:2]
        paths: list[str] = []
        for item in re.findall(r"`([^`]+)`", cell):
            if "/" not in item and paths and not paths[-1].endswith("/"):
                item = paths[-1].rsplit("/", 1)[0] + "/" + item
            paths.append(item)
        rows.append((paths, holds))
    assert rows, "docs/design.md has no '## Where code goes' table"
    return rows


def code_files() -> list[str]:
    """Every hand-written module under the code roots, as a repository path; the
    generated gRPC stubs are named together by their package's row."""
    return sorted(
        path.relative_to(REPO).as_posix()
        for root in CODE_ROOTS
        for path in (REPO / root).rglob("*.py")
        if path.name != "__init__.py"
        and "_pb2" not in path.name
        and "__pycache__" not in path.parts
    )


def covering_row(path: str, rows: list[tuple[list[str], str]]) -> tuple[str, str] | None:
    """The row for ``path``: the one naming it, else the one of its nearest directory."""
    best: tuple[str, str] | None = None
    for paths, holds in rows:
        for item in paths:
            if item == path:
                return item, holds
            nearer = best is None or len(item) > len(best[0])
            if item.endswith("/") and path.startswith(item) and nearer:
                best = (item, holds)
    return best


def test_the_code_table_names_every_package() -> None:
    rows = code_table()
    missing = []
    for root in CODE_ROOTS:
        for init in sorted((REPO / root).rglob("*/__init__.py")):
            package = init.parent.relative_to(REPO).as_posix() + "/"
            row = covering_row(package, rows)
            named = row is not None and (row[0] == package or f"`{init.parent.name}/`" in row[1])
            if not named:
                missing.append(package)
    assert missing == [], (
        "name each in docs/design.md's 'Where code goes' table, in its package's row"
    )


def test_the_code_table_names_every_module() -> None:
    """Each module is named in the row of its nearest directory (a module of a
    subpackage after that subpackage's name), or the row names its path; an action
    is named by the registry, which the actions row points to."""
    rows = code_table()
    missing = []
    for path in code_files():
        row = covering_row(path, rows)
        stem = path.rsplit("/", 1)[1].removesuffix(".py")
        if row is None:
            named = any(f"`{path}`" in holds for _, holds in rows)
        elif row[0] == path:
            named = True
        elif row[0] == "autoscaler/actions/" and stem in ACTIONS:
            named = "one file per action" in row[1]
        else:
            holds = row[1]
            for directory in path[len(row[0]) :].split("/")[:-1]:
                at = holds.find(f"`{directory}/`")
                holds = holds[at:] if at >= 0 else ""
            named = f"`{stem}`" in holds
        if not named:
            missing.append(path)
    assert missing == [], (
        "name each in docs/design.md's 'Where code goes' table, in its package's row"
    )


def test_every_path_in_the_code_table_exists() -> None:
    gone = [p for paths, _ in code_table() for p in paths if not (REPO / p).exists()]
    assert gone == []


# --- what pages and docstrings point to exists -------------------------------------------

REPO_PATH = re.compile(
    r"`((?:accel_common|exporter|autoscaler|nodeagent|tests|bench|rules|scenarios|deploy|"
    r"dashboards|docs)/[\w./-]*)`"
)
DOTTED = re.compile(r"``((?:accel_common|exporter|autoscaler|nodeagent)(?:\.\w+)+)``")
DOCSTRING_PATH = re.compile(r"``((?:accel_common|exporter|autoscaler|nodeagent)/[\w/]+\.py)``")


def test_every_path_a_page_names_exists() -> None:
    gone = [
        f"{path.relative_to(REPO)}: {m.group(1)}"
        for path in [REPO / "README.md", *PAGES]
        for m in REPO_PATH.finditer(path.read_text())
        if not (REPO / m.group(1)).exists()
    ]
    assert gone == []


def resolves(dotted: str) -> bool:
    """Whether ``a.b.c`` is a module, or an attribute of the longest module prefix."""
    parts = dotted.split(".")
    for cut in range(len(parts), 0, -1):
        try:
            found: object = importlib.import_module(".".join(parts[:cut]))
        except ImportError:
            continue
        for name in parts[cut:]:
            if not hasattr(found, name):
                return False
            found = getattr(found, name)
        return True
    return False


def test_every_module_a_docstring_names_exists() -> None:
    """A docstring that sends the reader to ``autoscaler.kube.ops.update_node`` or
    ``exporter/poller.py`` sends them somewhere real."""
    dead = []
    for relative in code_files():
        source = (REPO / relative).read_text()
        docs = [
            node.body[0].value.value
            for node in ast.walk(ast.parse(source))
            if isinstance(node, ast.Module | ast.ClassDef | ast.FunctionDef | ast.AsyncFunctionDef)
            and node.body
            and isinstance(node.body[0], ast.Expr)
            and isinstance(node.body[0].value, ast.Constant)
            and isinstance(node.body[0].value.value, str)
        ]
        for doc in docs:
            dead += [f"{relative}: {m}" for m in DOTTED.findall(doc) if not resolves(m)]
            dead += [
                f"{relative}: {m}" for m in DOCSTRING_PATH.findall(doc) if not (REPO / m).exists()
            ]
    assert dead == []


# --- links, anchors and the build ------------------------------------------------------


def slugify(heading: str) -> str:
    """Python-Markdown's toc slug, as mkdocs makes heading ids."""
    # Markup is dropped (code spans and emphasis, a link keeps its text); "_" stays.
    text = re.sub(r"`|\*|\[([^\]]*)\]\([^)]*\)", lambda m: m.group(1) or "", heading)
    text = unicodedata.normalize("NFKD", text).encode("ascii", "ignore").decode()
    text = re.sub(r"[^\w\s-]", "", text).strip().lower()
    return re.sub(r"[-\s]+", "-", text)


def without_code_blocks(text: str) -> str:
    return re.sub(r"^( *)(```|~~~).*?^\1\2", "", text, flags=re.S | re.M)


def without_code(text: str) -> str:
    return re.sub(r"`[^`\n]*`", "", without_code_blocks(text))


def anchors(path: Path) -> set[str]:
    headings = re.findall(r"^#{1,6} +(.+?) *#*$", without_code_blocks(rendered(path)), re.M)
    return {slugify(h) for h in headings}


def links(path: Path) -> list[str]:
    return re.findall(r"\]\(([^)\s]+)\)", without_code(rendered(path)))


@pytest.mark.parametrize(
    "path", [REPO / "README.md", *PAGES], ids=lambda p: p.relative_to(REPO).as_posix()
)
def test_every_relative_link_resolves(path: Path) -> None:
    broken = []
    for link in links(path):
        if re.match(r"^[a-z]+:", link):
            continue
        target, _, anchor = link.partition("#")
        resolved = (path.parent / target).resolve() if target else path
        if not resolved.is_relative_to(REPO):
            broken.append(f"{link}: outside the repository")
        elif not resolved.exists():
            broken.append(f"{link}: no such file")
        elif anchor and resolved.suffix == ".md" and anchor not in anchors(resolved):
            broken.append(f"{link}: no heading #{anchor} in {resolved.relative_to(REPO)}")
    assert broken == []


def test_readme_links_into_docs_only_inside_the_repository() -> None:
    readme = (REPO / "README.md").read_text()
    assert "docs/index.md" in readme
    for link in links(REPO / "README.md"):
        assert not link.startswith(("/", "..")), link


def test_no_stale_sentences() -> None:
    for path in PAGES:
        text = path.read_text()
        for phrase in STALE:
            assert phrase not in text, f"{path.relative_to(REPO)}: {phrase}"


def test_design_states_the_import_contracts() -> None:
    """The contracts on the design page are those import-linter enforces, and each
    layers contract's layers are listed there, top to bottom."""
    import tomllib

    config = tomllib.loads((REPO / "pyproject.toml").read_text())
    contracts = config["tool"]["importlinter"]["contracts"]
    design = page("design.md").split("## Contracts", 1)[1].split("\n## ", 1)[0]
    for contract in contracts:
        assert contract["name"] in design, contract["name"]
    blocks = [
        [line.strip() for line in block.strip().splitlines()]
        for block in re.findall(r"```\n(.*?)```", design, re.S)
    ]
    layered = [[layer.strip() for layer in c["layers"]] for c in contracts if c["type"] == "layers"]
    assert blocks == layered


def test_the_code_table_is_kept_once() -> None:
    """The design page holds the table; the README links to it instead of a copy
    that a test would have to hold equal."""
    pages = [p for p in [REPO / "README.md", *PAGES] if "| path | holds |" in p.read_text()]
    assert pages == [DOCS / "design.md"]


def test_mkdocs_build_is_strict_and_clean(tmp_path: Path) -> None:
    """No dead link, anchor or page left out of the nav: --strict fails on each."""
    mkdocs = Path(sys.executable).parent / "mkdocs"
    result = subprocess.run(
        # Not --quiet: it hides the warnings from the count that --strict fails on.
        [str(mkdocs), "build", "--strict", "-d", str(tmp_path / "site")],
        cwd=REPO,
        capture_output=True,
        text=True,
        env={"NO_MKDOCS_2_WARNING": "1", "PATH": str(mkdocs.parent)},
        timeout=120,
    )
    assert result.returncode == 0, result.stderr
    assert (tmp_path / "site" / "actions" / "index.html").exists()
