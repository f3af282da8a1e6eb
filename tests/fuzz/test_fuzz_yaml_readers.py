"""Every reader of operator-written YAML, fuzzed: rule files (and ``check``), rule
unit-test files (and the ``test`` command that runs them), scenarios, sim scripts
(and ``--sim-devices``) and the exporter's web config.

Each case is a file on disk, as the reader meets it: a committed valid document
with one to three places broken (``strategies.yaml_documents``), or plain bytes.
The property (``harness.check``): the reader returns a valid result or raises its
own error naming the file, within the time and memory bound; the commands return
an exit status of 0, 1 or 2 and nothing escapes them.
"""

from __future__ import annotations

import contextlib
import functools
import io
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from autoscaler.commands.check import check as check_command
from autoscaler.engine.ruletest import main as run_rule_tests
from autoscaler.ruleset.errors import RuleSetError
from autoscaler.ruleset.loader import load_ruleset
from autoscaler.ruleset.testfile import RuleTestFile, parse_test_file
from autoscaler.ruleset.watch import RuleWatcher
from autoscaler.simulate.scenario import ScenarioError, load_scenario
from exporter.backends.base import BackendOptions
from exporter.backends.sim import SimBackend, SimScriptError, load_script, parse_sim_devices
from exporter.webconfig import WebConfigError, load_web_config
from tests.fuzz.harness import budget, check, nonfinite
from tests.fuzz.strategies import HOSTILE_YAML, files_or_bytes, load_seeds
from tests.support.paths import FIXTURES, REPO
from tests.support.pki import make_pki

RULE_TEST_RULES = FIXTURES / "ruletests" / "rules.yaml"

RULE_SEEDS = load_seeds(
    REPO / "rules" / "remediation.yaml",
    FIXTURES / "ruletests" / "rules.yaml",
    *sorted((FIXTURES / "rules").rglob("*.yaml")),
)
SCENARIO_SEEDS = load_seeds(*sorted((REPO / "scenarios").glob("*.yaml")))
SIM_SEEDS = load_seeds(REPO / "exporter" / "data" / "demo-faults.yaml")
SIM_DEVICES = {f"nvidia{i}" for i in range(8)} | {"amd0", "amd1", "oneapi0", "cpu0"}


def _rule_test_seeds() -> list[Any]:
    """One test per seed (a whole file runs each of its tests: one is enough per
    case, and keeps the case fast), with the rule file named by absolute path."""
    out = []
    for path in sorted((FIXTURES / "ruletests").rglob("*_test.yaml")):
        for doc in load_seeds(path):
            if not isinstance(doc, dict) or not isinstance(doc.get("tests"), list):
                continue
            for test in doc["tests"]:
                out.append({**doc, "ruleFiles": [str(RULE_TEST_RULES)], "tests": [test]})
    return out


RULE_TEST_SEEDS = _rule_test_seeds()


@pytest.fixture(scope="module")
def workdir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("fuzz-yaml")


def _quiet(call: Callable[[], int]) -> Callable[[], int]:
    """A command with its stdout and stderr kept (and dropped)."""

    def run() -> int:
        with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(io.StringIO()):
            return call()

    return run


@budget(200)
@given(data=files_or_bytes(RULE_SEEDS), source=st.sampled_from(["prometheus", "scrape"]))
def test_rule_files(workdir: Path, data: bytes, source: str) -> None:
    path = workdir / "rules.yaml"
    path.write_bytes(data)
    rs = check(
        "rules", lambda: load_ruleset([path], source=source), (RuleSetError,), names=path.name
    )
    if not isinstance(rs, BaseException):
        assert 1.0 <= rs.evaluation_interval <= 3600.0, rs.evaluation_interval
        assert not nonfinite(rs), nonfinite(rs)
    status = check("rules: check", _quiet(lambda: check_command([path], source=source)), ())
    assert status in (0, 1, 2), status


@pytest.fixture(scope="module")
def watched(workdir: Path) -> tuple[Path, RuleWatcher]:
    """A rule watcher started on good rules, as a running controller holds it."""
    path = workdir / "watched" / "rules.yaml"
    path.parent.mkdir()
    path.write_bytes((REPO / "rules" / "remediation.yaml").read_bytes())
    return path, RuleWatcher([str(path)], source="prometheus")


@budget(100)
@given(data=files_or_bytes(RULE_SEEDS))
def test_rule_hot_reload(watched: tuple[Path, RuleWatcher], data: bytes) -> None:
    """A running controller's reload (SIGHUP) of a rewritten rule file: never raises;
    bad rules keep the last good ones in force with ``reload_success`` False."""
    path, watcher = watched
    before = watcher.current
    path.write_bytes(data)
    check("rules: hot reload", watcher.reload, ())
    if watcher.reload_success:
        assert not watcher.last_problems
    else:
        assert watcher.current is before, "a failed reload replaced the rules in force"
        assert watcher.last_problems, "a failed reload without a reason"


@budget(150)
@given(data=files_or_bytes(RULE_TEST_SEEDS))
def test_rule_test_files(workdir: Path, data: bytes) -> None:
    path = workdir / "rules_test.yaml"
    path.write_bytes(data)
    parsed = check("rule tests: parse", lambda: parse_test_file(path), ())
    if isinstance(parsed, RuleTestFile):
        # Sample values may be ±Inf and NaN (promtool's too); times may not.
        assert not nonfinite(parsed, allow=("values",)), nonfinite(parsed, allow=("values",))
    else:
        assert isinstance(parsed, list) and parsed, parsed
        assert all(path.name in p for p in parsed), parsed
    status = check("rule tests: test", _quiet(lambda: run_rule_tests([str(path)])), ())
    assert status in (0, 1, 2), status


@budget(150)
@given(data=files_or_bytes(SCENARIO_SEEDS))
def test_scenarios(workdir: Path, data: bytes) -> None:
    path = workdir / "scenario.yaml"
    path.write_bytes(data)
    scenario = check("scenarios", lambda: load_scenario(path), (ScenarioError,), names=path.name)
    assert not nonfinite(scenario), nonfinite(scenario)


@budget(150)
@given(data=files_or_bytes(SIM_SEEDS))
def test_sim_scripts(workdir: Path, data: bytes) -> None:
    path = workdir / "faults.yaml"
    path.write_bytes(data)
    events = check(
        "sim scripts", lambda: load_script(path, SIM_DEVICES), (SimScriptError,), names=path.name
    )
    # A hang of forever is documented (``hang: forever``); nothing else is endless.
    assert not nonfinite(events, allow=("hang",)), nonfinite(events, allow=("hang",))


_vendors = st.sampled_from(["nvidia", "amd", "oneapi", "cpu", "NVIDIA", "", "x"])
_counts = st.one_of(
    st.integers(0, 16).map(str),
    st.sampled_from(["99999999999999", "9" * 5000, "-1", "1e3", "٣", "0x10", " 2", ""]),
)


@budget(100)
@given(
    text=st.one_of(
        st.lists(st.tuples(_vendors, st.sampled_from([":", "", "::"]), _counts), max_size=4).map(
            lambda parts: ",".join(f"{v}{s}{c}" for v, s, c in parts)
        ),
        st.text(max_size=40),
    )
)
def test_sim_devices_flag(text: str) -> None:
    """``--sim-devices``: parsed, then the devices made, as the exporter does at start."""

    def start() -> int:
        devices = parse_sim_devices(text)
        return len(SimBackend(BackendOptions(sim_devices=devices)).discover())

    check("sim devices flag", start, (ValueError,))


def _web_seeds(pki: Path, bad: dict[str, Path]) -> list[Any]:
    users = {"alice": "$2b$04$" + "a" * 53, "bob": "$2y$10$" + "/" * 53}
    tls = {
        "cert_file": str(pki / "server.crt"),
        "key_file": str(pki / "server.key"),
        "client_ca_file": str(pki / "ca.crt"),
        "client_auth_type": "RequireAndVerifyClientCert",
        "min_version": "TLS12",
        "max_version": "TLS13",
        "cipher_suites": ["TLS_ECDHE_ECDSA_WITH_AES_128_GCM_SHA256"],
        "curve_preferences": ["CurveP256"],
        "prefer_server_cipher_suites": True,
    }
    seeds: list[Any] = [
        {"basic_auth_users": users},
        {"http_server_config": {"headers": {"X-Frame-Options": "deny"}}},
        {"tls_server_config": tls, "basic_auth_users": users},
        {
            "tls_server_config": {
                "cert": (pki / "server.crt").read_text(),
                "key_file": str(pki / "server.key"),
            }
        },
    ]
    # Certificates, keys and CAs that are not: empty, garbage, not UTF-8, a directory,
    # a device that never ends.
    for what in ("cert_file", "key_file", "client_ca_file"):
        for path in bad.values():
            seeds.append({"tls_server_config": {**tls, what: str(path)}})
    return seeds


_BAD_FILES = {
    "empty.pem": b"",
    "garbage.pem": b"-----BEGIN CERTIFICATE-----\n!!!!\n-----END CERTIFICATE-----\n",
    "latin1.pem": b"\xff\xfe\x00-----BEGIN\n",
    "huge.pem": b"-----BEGIN CERTIFICATE-----\n" + b"A" * (8 * 1024 * 1024),
}


@functools.cache
def _web_documents(workdir: Path) -> st.SearchStrategy[bytes]:
    """Built once per session: a PKI and the bad files, and the documents naming them
    (not a fixture, so that a failing case does not print every seed)."""
    pki = workdir / "pki"
    pki.mkdir()
    make_pki(pki)
    bad: dict[str, Path] = {"dir": workdir, "zero": Path("/dev/zero")}
    for name, content in _BAD_FILES.items():
        (workdir / name).write_bytes(content)
        bad[name] = workdir / name
    return files_or_bytes(_web_seeds(pki, bad))


@budget(250)
@given(data=st.data())
def test_web_config(workdir: Path, data: st.DataObject) -> None:
    path = workdir / "web.yml"
    path.write_bytes(data.draw(_web_documents(workdir)))
    result = check("web config", lambda: load_web_config(path), (WebConfigError,), names=str(path))
    if not isinstance(result, BaseException):
        for name, value in result.headers.items():
            for text in (name, value):
                assert not set(text) & {"\r", "\n", "\x00"}, f"header {name!r}: {value!r}"


def test_hostile_texts_are_one_line() -> None:
    """Every raw replacement is one line, so it fits wherever a value goes."""
    assert all("\n" not in t for t in HOSTILE_YAML)
