"""``simulate --seeds N`` and ``--compare``: the interval math against known
values, a two-seed run in local processes whose runs are the single runs of
those seeds, a paired comparison of a rule set with itself (every difference 0,
every interval of width 0), a two-seed comparison on a local Ray instance, and
the flags' errors."""

from __future__ import annotations

import argparse
import json
import math
import subprocess
import sys
from pathlib import Path
from typing import Any

import psutil
import pytest

from autoscaler.commands import simulate as simulate_command
from autoscaler.simulate import seeds
from autoscaler.simulate.scenario import load_scenario
from autoscaler.simulate.stats import (
    across,
    figures,
    interval,
    paired,
    t_cdf,
    t_quantile,
)

# Two hours of three 8-GPU nodes: two jobs an hour, and a fatal fault at 30
# minutes on the first node (the rules migrate its job). About two seconds a run.
# Slow: a local Ray instance takes seconds to start (20 s and more while the
# machine is busy), and the process runs a few seconds each.
pytestmark = [pytest.mark.slow, pytest.mark.timeout(300)]

TINY = """\
apiVersion: accel-fleet/v1
kind: Scenario
spec:
  duration: 2h
  evaluationInterval: 30s
  seed: 3
  pools:
    - {name: h100, vendor: nvidia, devicesPerNode: 8, initial: 3, min: 3, max: 3,
       provisionTime: 5m}
  workload:
    arrivalsPerHour: 2
    sizes: {8: 1}
    duration: {distribution: fixed, value: 1h}
    checkpointInterval: 15m
    restartOverhead: 2m
  faults:
    events:
      - {at: 30m, kind: fatal, node: h100-0000, device: nvidia0}
"""


# A rule of the test's own (the shipped rules change with every issue): move the
# jobs off a device that reported a fatal fault. SILENT never acts.
RULE = """\
apiVersion: accel-fleet/v1
kind: RuleSet
spec:
  evaluationInterval: 30s
  rules:
    - name: fatal
      expr: increase(accel_fault_events_total{{severity="{severity}"}}[5m]) > 0
      target: device
      action: {{type: migrate_jobs}}
      cooldown: 1h
"""


@pytest.fixture
def tiny(tmp_path: Path) -> Path:
    path = tmp_path / "tiny.yaml"
    path.write_text(TINY)
    return path


@pytest.fixture
def rules(tmp_path: Path) -> str:
    path = tmp_path / "rules.yaml"
    path.write_text(RULE.format(severity="fatal"))
    return str(path)


@pytest.fixture
def silent(tmp_path: Path) -> str:
    path = tmp_path / "silent.yaml"
    path.write_text(RULE.format(severity="no-such-severity"))
    return str(path)


def parse(*argv: str) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="accel-autoscaler simulate")
    simulate_command.add_arguments(parser)
    return parser.parse_args(list(argv))


def run_cli(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    code = simulate_command.main(parse(*argv), stderr=sys.stderr)
    out, err = capsys.readouterr()
    return code, out, err


# -- the interval math ---------------------------------------------------------------

# t(0.975, df) from published tables (to 9 or 10 digits).
T_975 = {
    1: 12.706204736,
    2: 4.302652730,
    3: 3.182446305,
    5: 2.570581836,
    10: 2.228138852,
    15: 2.131449546,
    30: 2.042272456,
    100: 1.983971519,
    1000: 1.962339081,
}


@pytest.mark.parametrize(("df", "expected"), sorted(T_975.items()))
def test_t_quantile_matches_the_tables(df: int, expected: float) -> None:
    assert t_quantile(0.975, df) == pytest.approx(expected, abs=2e-9)
    assert t_cdf(expected, df) == pytest.approx(0.975, abs=1e-10)


def test_t_distribution_is_symmetric_and_wider_than_the_normal() -> None:
    assert t_cdf(0.0, 4) == pytest.approx(0.5)
    assert t_cdf(-2.0, 4) == pytest.approx(1.0 - t_cdf(2.0, 4))
    assert t_quantile(0.995, 10) == pytest.approx(3.169272673, abs=1e-8)
    assert t_quantile(0.975, 1e6) == pytest.approx(1.959966, abs=1e-5)  # the normal's
    with pytest.raises(ValueError, match=r"0\.5 < p < 1"):
        t_quantile(0.2, 3)


def test_interval_is_mean_plus_minus_t_s_over_root_n() -> None:
    i = interval([1.0, 2.0, 3.0, 4.0])
    s = math.sqrt(5.0 / 3.0)
    assert i.mean == 2.5 and i.n == 4
    half = 3.182446305 * s / 2.0
    assert i.half == pytest.approx(half, rel=1e-9)
    assert i.low == pytest.approx(2.5 - half) and i.significant  # [0.45, 4.55] > 0
    assert not interval([-1.0, 1.0, 2.0]).significant  # 0.67 ± 3.8 holds 0
    one = interval([7.0])
    assert one.half is None and one.low is None and not one.significant
    flat = interval([3.0, 3.0, 3.0])
    assert flat.half == 0.0 and flat.significant
    zero = interval([0.0, 0.0])
    assert zero.half == 0.0 and not zero.significant
    with pytest.raises(ValueError, match="at least one value"):
        interval([])


def test_figures_flatten_a_section_and_counts_a_seed_lacks_are_zero() -> None:
    section: dict[str, Any] = {
        "jobs_completed": 10,
        "goodput_ratio": 0.5,
        "queue_wait_seconds": {"p50": 60.0, "p95": 600.0},
        "actions": {"migrate_jobs": 2},
        "time_to_remediate_seconds_by_kind": {"fatal": {"p50": 30.0}},
        "wall_seconds": 3.2,
        "breaker_trips": 0,
    }
    flat = figures(section)
    assert "wall_seconds" not in flat  # the machine's time, not the fleet's
    assert flat["queue_wait_seconds.p95"] == 600.0
    assert flat["time_to_remediate_seconds_by_kind.fatal.p50"] == 30.0
    other = {"jobs_completed": 14.0, "goodput_ratio": 0.7, "breaker_trips": 0.0}
    agg = across([flat, other])
    assert agg["actions.migrate_jobs"].mean == 1.0  # 2 and 0: a count it lacks is 0
    assert agg["time_to_remediate_seconds_by_kind.fatal.p50"].n == 1  # a figure is not
    diff = paired([flat, flat], [other, other])
    assert diff["jobs_completed"].mean == 4.0 and diff["jobs_completed"].half == 0.0
    with pytest.raises(ValueError, match="as many of A as of B"):
        paired([flat], [])


# -- runs ----------------------------------------------------------------------------


def _without_wall(section: dict[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in section.items() if k != "wall_seconds"}


def test_two_seeds_in_processes_are_the_two_single_runs(
    tiny: Path, rules: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    many = tmp_path / "many"
    code, out, err = run_cli(
        capsys, str(tiny), "--rules", rules, "--seeds", "2", "--jobs", "2", "--out", str(many)
    )
    assert code == 0, err
    assert "seeds 3..4 (2)" in out
    assert "Student t on the per-seed values" in out and "t(0.975, 1) = 12.706" in out
    assert "runs on local processes" in err
    assert (many / "spread.png").stat().st_size > 0
    doc = json.loads((many / "seeds.json").read_text())
    assert doc["seeds"] == [3, 4]
    assert [r["seed"] for r in doc["runs"]] == [3, 4]
    # The second seed's run is what a single run with --seed 4 writes.
    single = tmp_path / "single"
    code, _, err = run_cli(
        capsys, str(tiny), "--rules", rules, "--seed", "4", "--out", str(single), "--no-plots"
    )
    assert code == 0, err
    alone = json.loads((single / "summary.json").read_text())
    for mode in ("rules", "baseline"):
        assert _without_wall(doc["runs"][1][mode]) == _without_wall(alone[mode])
    # The aggregate is the interval over the two runs' values.
    useful = [r["rules"]["device_hours_useful"] for r in doc["runs"]]
    expect = interval(useful)
    got = doc["aggregate"]["rules"]["device_hours_useful"]
    assert got["mean"] == pytest.approx(expect.mean, rel=1e-5)
    assert got["high"] == pytest.approx(expect.high, rel=1e-5)
    assert got["n"] == 2
    row = next(line for line in out.splitlines() if line.startswith("device_hours_useful"))
    assert "±" in row


def _assert_all_zero(doc: dict[str, Any]) -> None:
    assert doc["difference"], "figures compared"
    for name, d in doc["difference"].items():
        # A figure only one seed has (no job of that size on the other) has no
        # interval; every other one is exactly 0 wide.
        width = (None, None) if d["n"] == 1 else (0.0, 0.0)
        assert (d["mean"], d["low"], d["high"]) == (0.0, *width), name
        assert not d["significant"], name
    assert sum(d["n"] == 2 for d in doc["difference"].values()) > 20


def test_a_rule_set_compared_with_itself_differs_by_zero(
    tiny: Path, rules: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out_dir = tmp_path / "same"
    code, out, err = run_cli(
        capsys,
        str(tiny),
        "--compare",
        rules,
        rules,
        "--seeds",
        "2",
        "--out",
        str(out_dir),
        "--no-plots",
    )
    assert code == 0, err
    doc = json.loads((out_dir / "compare.json").read_text())
    _assert_all_zero(doc)
    assert [r["seed"] for r in doc["a"]["runs"]] == [3, 4] == [r["seed"] for r in doc["b"]["runs"]]
    assert all("baseline" not in r for r in doc["a"]["runs"])  # the rules runs only
    assert "B - A [95% interval]" in out and "+0 [+0, +0]" in out and " *" not in out
    assert not (out_dir / "spread.png").exists()


def test_a_rule_that_acts_against_one_that_never_does(
    tiny: Path, rules: str, silent: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """On both seeds the fault at 30 minutes is acted on by B only: one action
    more on every seed is a difference of exactly 1 with no spread, marked."""
    out_dir = tmp_path / "acts"
    code, out, err = run_cli(
        capsys,
        str(tiny),
        "--compare",
        silent,
        rules,
        "--seeds",
        "2",
        "--out",
        str(out_dir),
        "--no-plots",
    )
    assert code == 0, err
    doc = json.loads((out_dir / "compare.json").read_text())
    acts = doc["difference"]["actions.migrate_jobs"]
    assert (acts["mean"], acts["low"], acts["high"], acts["significant"]) == (1, 1, 1, True)
    assert doc["mean_a"]["actions.migrate_jobs"]["mean"] == 0  # a count A never had
    row = next(line for line in out.splitlines() if line.startswith("actions.migrate_jobs "))
    assert row.endswith("+1 [+1, +1] *")
    assert "seed 3, B (" in err and "(4/4)" in err


def test_schedulers_compared_on_the_same_seeds(
    tiny: Path, rules: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out_dir = tmp_path / "sched"
    code, out, err = run_cli(
        capsys,
        str(tiny),
        "--rules",
        rules,
        "--compare-scheduler",
        "first-fit",
        "placement",
        "--seeds",
        "2",
        "--out",
        str(out_dir),
    )
    assert code == 0, err
    doc = json.loads((out_dir / "compare.json").read_text())
    assert (doc["a"]["label"], doc["b"]["label"]) == ("first-fit", "placement")
    # Same seeds, same arrivals: the jobs submitted are the same in both arms.
    assert doc["difference"]["jobs_submitted"]["mean"] == 0.0
    assert "A: first-fit" in out and "B: placement" in out
    assert (out_dir / "spread.png").stat().st_size > 0


def test_a_comparison_on_a_local_ray_instance(tiny: Path, rules: str, tmp_path: Path) -> None:
    # In a process of its own: starting Ray imports its accelerator probes (dpctl
    # among them) into the process that starts it, and this test worker's later
    # modules check that the exporter keeps dpctl out of its own process.
    out_dir = tmp_path / "ray"
    argv = [str(tiny), "--compare", rules, rules, "--seeds", "2", "--ray-address", "local"]
    argv += ["--jobs", "2", "--out", str(out_dir), "--no-plots"]
    main = "import sys; from autoscaler.cli import main; sys.exit(main())"
    proc = subprocess.run(
        [sys.executable, "-c", main, "simulate", *argv],
        capture_output=True,
        text=True,
        timeout=240,
        cwd=Path(__file__).resolve().parents[2],
    )
    assert proc.returncode == 0, proc.stderr
    assert "runs on Ray (local)" in proc.stderr
    # The instance the command started is shut down with it.
    left = [p.info["name"] for p in psutil.process_iter(["name"])]
    assert not {"raylet", "gcs_server"} & set(left), left
    doc = json.loads((out_dir / "compare.json").read_text())
    _assert_all_zero(doc)
    assert [r["seed"] for r in doc["b"]["runs"]] == [3, 4]


def test_a_run_that_fails_in_its_process_says_which_and_why(tiny: Path, rules: str) -> None:
    scenario = load_scenario(tiny)
    arm = seeds.Arm("A", "odd", seeds.RuleText.read([rules]), scheduler="no-such-scheduler")
    tasks = seeds.make_tasks(scenario, [arm], [3], baseline=False)
    with pytest.raises(seeds.SeedRunError, match=r"seed 3 \(odd\): KeyError: 'no-such-scheduler'"):
        seeds.run_local(tasks, jobs=1)


def test_without_ray_the_error_says_what_to_install(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "ray", None)  # import ray raises ImportError
    with pytest.raises(seeds.SeedRunError, match=r"pip install 'accel-fleet\[ray\]'"):
        seeds.import_ray()


def test_ray_init_arguments() -> None:
    local = seeds.ray_init_args("local", 3)
    assert local["num_cpus"] == 3 and "address" not in local
    assert seeds.ray_init_args("ray://head:10001", 3)["address"] == "ray://head:10001"
    assert "num_cpus" not in seeds.ray_init_args("auto", 3)


# -- bad input -----------------------------------------------------------------------


@pytest.mark.parametrize(
    ("argv", "said"),
    [
        (["--seeds", "0"], "0 is less than 1"),
        (["--seeds", "two"], "'two' is not a whole number"),
        (["--jobs", "-1"], "-1 is less than 1"),
        (["--compare-scheduler", "first-fit", "best"], "invalid choice: 'best'"),
        (["--compare", "rules/"], "expected 2 arguments"),
    ],
)
def test_bad_values_are_argparse_errors(
    argv: list[str], said: str, capsys: pytest.CaptureFixture[str]
) -> None:
    with pytest.raises(SystemExit) as exit_:
        parse("s.yaml", *argv)
    assert exit_.value.code == 2
    assert said in capsys.readouterr().err


@pytest.mark.parametrize(
    ("argv", "said"),
    [
        (["--compare", "R", "R"], "needs --seeds N with N >= 2"),
        (["--compare", "R", "R", "--seeds", "1"], "needs --seeds N with N >= 2"),
        (["--compare", "R", "R", "--seeds", "2", "--rules", "R"], "leave out --rules"),
        (
            ["--compare", "R", "R", "--seeds", "2", "--baseline", "none"],
            "leave out --baseline",
        ),
        (
            ["--compare", "R", "R", "--compare-scheduler", "first-fit", "placement"],
            "give one",
        ),
        (["--jobs", "2"], "add --seeds N"),
        (["--ray-address", "local"], "add --seeds N"),
        (["--seeds", "2", "--ray-address", " "], "--ray-address is empty"),
    ],
)
def test_conflicting_flags_say_what_to_do(
    tiny: Path, rules: str, argv: list[str], said: str, capsys: pytest.CaptureFixture[str]
) -> None:
    """``R`` stands for a rule file that loads."""
    code, _, err = run_cli(capsys, str(tiny), *(rules if a == "R" else a for a in argv))
    assert code == 2
    assert said in err and "accel-autoscaler: error:" in err


def test_an_unknown_rule_path_is_refused_before_any_run(
    tiny: Path, rules: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    missing = str(tmp_path / "no-such-rules")
    code, _, err = run_cli(
        capsys, str(tiny), "--compare", rules, missing, "--seeds", "2", "--out", str(tmp_path)
    )
    assert code == 2
    assert f"{missing}: no such file or directory" in err
    assert f"the rules of B ({missing}) did not load (1 problem above)" in err
    assert "runs on" not in err  # nothing ran
