"""The documentation site (mkdocs.yml, docs/) stays true: its metric table is the
catalogue's, every flag that --help shows is documented, the examples load and
pass, every relative link and anchor in the README and the docs resolves, the
action parameter tables come from the actions' own specs, and the site builds with
``mkdocs build --strict``."""

from __future__ import annotations

import argparse
import functools
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
from exporter import schema
from exporter.cli import build_parser
from tests.support.paths import REPO

DOCS = REPO / "docs"
PAGES = sorted(DOCS.rglob("*.md"))
HOOK_PATH = DOCS / "hooks" / "action_tables.py"

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


def test_design_has_the_readme_layout_table() -> None:
    def table(text: str) -> str:
        return text.split("| path | holds |", 1)[1].split("\n\n", 1)[0]

    assert table(page("design.md")) == table((REPO / "README.md").read_text())


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
