"""What the fuzz suite found, kept as explicit cases under the same property.

A derandomized hypothesis run draws different cases once a strategy or a test
changes, so a failure it found once may not be drawn again. Each case here is a
reproducer, minimized by hand, that must keep answering with the reader's own
error (naming the file) within the bounds, whatever the generated cases do.
"""

from __future__ import annotations

import contextlib
import io
from collections.abc import Callable
from pathlib import Path

import pytest

from autoscaler.engine.ruletest import main as run_rule_tests
from autoscaler.placement.extender import BadArgs, parse_args
from autoscaler.ruleset.errors import RuleSetError
from autoscaler.ruleset.loader import load_ruleset
from autoscaler.simulate.scenario import ScenarioError, load_scenario
from exporter.backends.sim import SimScriptError, load_script
from exporter.webconfig import WebConfigError, load_web_config
from tests.fuzz.harness import check
from tests.fuzz.test_fuzz_bodies import EXTENDER, POD
from tests.support.pki import Pki

LONG_NAME = "9" * 5000


def test_a_rule_path_too_long_for_the_os(tmp_path: Path) -> None:
    """F1: ENAMETOOLONG from ``is_dir()``, as a ``check`` argument or a test's ``ruleFiles``."""
    check("findings: rules", lambda: load_ruleset([LONG_NAME]), (RuleSetError,), names=LONG_NAME)
    test_file = tmp_path / "long_test.yaml"
    test_file.write_text(f"ruleFiles: [{LONG_NAME}]\ntests: []\n")

    def run() -> int:
        with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(io.StringIO()):
            return run_rule_tests([str(test_file)])

    assert check("findings: rule tests", run, ()) == 2


def test_a_scenario_pool_written_as_a_set(tmp_path: Path) -> None:
    """F2: ``!!set`` is a mapping with another tag; its fields are all unknown."""
    path = tmp_path / "set.yaml"
    path.write_text(
        "apiVersion: accel-fleet/v1\nkind: Scenario\nspec:\n  duration: 1h\n"
        "  pools:\n    - !!set {a, b}\n  workload: {arrivalsPerHour: 1}\n"
    )
    check("findings: scenarios", lambda: load_scenario(path), (ScenarioError,), names=path.name)


def _web(tmp_path: Path, pki: Pki, **tls: str) -> Callable[[], object]:
    fields = {"cert_file": str(pki.dir / "server.crt"), "key_file": str(pki.dir / "server.key")}
    fields.update(tls)
    body = ", ".join(f"{k}: {v}" for k, v in fields.items())
    path = tmp_path / "web.yml"
    path.write_text(f"tls_server_config: {{{body}}}\n")
    return lambda: load_web_config(path)


NOT_ASCII = b"\xff\xfe\x00-----BEGIN\n"


@pytest.mark.parametrize(
    "tls",
    [
        # F3: a certificate or client CA that is not ASCII (TypeError from ssl).
        {"cert_file": "{bad}"},
        {"client_ca_file": "{bad}", "client_auth_type": "RequireAndVerifyClientCert"},
        # F4: a NUL byte in a path (ValueError from os.stat).
        {"cert_file": '"a\\x00b"'},
        {"client_ca_file": '"a\\x00b"', "client_auth_type": "RequireAndVerifyClientCert"},
    ],
    ids=["cert-not-ascii", "ca-not-ascii", "cert-path-nul", "ca-path-nul"],
)
def test_web_config_files_and_paths(tmp_path: Path, pki: Pki, tls: dict[str, str]) -> None:
    bad = tmp_path / "not-ascii.pem"
    bad.write_bytes(NOT_ASCII)
    load = _web(tmp_path, pki, **{k: v.format(bad=bad) for k, v in tls.items()})
    check("findings: web config", load, (WebConfigError,), names="web.yml")


@pytest.mark.parametrize("name", [[], {}, 7, None])
def test_an_extender_node_named_by_a_non_string(name: object) -> None:
    """F5: ``Nodes.items[].metadata.name`` of another type reached a set lookup (500)."""
    body = {"Pod": POD, "Nodes": {"metadata": {}, "items": [{"metadata": {"name": name}}]}}

    def answer() -> object:
        args = parse_args(body)
        return EXTENDER.filter(args), EXTENDER.prioritize(args)

    check("findings: extender args", answer, (BadArgs,))


@pytest.mark.parametrize("tagged", ["!!timestamp x", "!!bool x"])
def test_a_plain_yaml_tag_on_a_value_it_cannot_construct(tmp_path: Path, tagged: str) -> None:
    """F6: PyYAML's own constructors raise AttributeError and KeyError for these."""
    rules = tmp_path / "tagged.yaml"
    rules.write_text(
        f"apiVersion: accel-fleet/v1\nkind: RuleSet\nspec:\n  evaluationInterval: {tagged}\n"
        "  rules: []\n"
    )
    load = lambda: load_ruleset([rules])  # noqa: E731
    check("findings: rules", load, (RuleSetError,), names=rules.name)
    script = tmp_path / "tagged-script.yaml"
    script.write_text(f"events:\n  - {{at: {tagged}, device: nvidia0}}\n")
    load_sim = lambda: load_script(script, {"nvidia0"})  # noqa: E731
    check("findings: sim scripts", load_sim, (SimScriptError,), names=script.name)
