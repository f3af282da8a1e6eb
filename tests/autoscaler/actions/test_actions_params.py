"""Action parameters: defaults, validation that reports every problem, and a registry
whose entries agree with their own files (descheduler-style table-driven tests)."""

from __future__ import annotations

import importlib
import pkgutil
from collections.abc import Mapping
from typing import Any

import pytest

import autoscaler.actions
from accel_common.durations import duration_seconds
from autoscaler.actions import ACTIONS, from_params
from autoscaler.actions.base import Taint, param_keys, parse_taint, taint_problems
from autoscaler.actions.ops.drain import DrainParams, selector_problems
from autoscaler.actions.ops.migrate import MigrateJobsParams
from autoscaler.actions.scale_node_pool import ScaleNodePoolParams
from autoscaler.ruleset.model import TARGETS

DEFAULT_TAINT = "accel-fleet.io/faulty=true:NoSchedule"

DEFAULTS: dict[str, dict[str, Any]] = {
    "cordon": {},
    "uncordon": {},
    "taint": {"taint": DEFAULT_TAINT},
    "drain": {
        "drainTimeout": 600.0,
        "gracePeriodSeconds": None,
        "podSelector": None,
        "forceDeleteAfterTimeout": False,
    },
    "migrate_jobs": {"taint": DEFAULT_TAINT, "drainTimeout": 600.0, "deviceOnly": False},
    "requeue_job": {"maxRequeues": 3, "backoff": 60.0, "maxBackoff": 3600.0, "via": "delete"},
    "rebalance": {
        "maxMovesPerCycle": 1,
        "minUtilizationGap": 0.2,
        "nodeCooldown": 1800.0,
        "gainHorizon": 3600.0,
    },
    "reset_devices": {
        "taint": DEFAULT_TAINT,
        "drainTimeout": 600.0,
        "wait": 600.0,
        "moveJobs": True,
    },
    "mark_for_return": {},
    "reboot_node": {
        "method": "auto",
        "snrNamespace": "openshift-workload-availability",
        "taint": DEFAULT_TAINT,
        "drainTimeout": 600.0,
        "wait": 1200.0,
    },
}

TARGETS_OF: dict[str, tuple[str, ...]] = {
    "cordon": ("node", "device"),
    "taint": ("node", "device"),
    "drain": ("node", "device"),
    "migrate_jobs": ("node", "device"),
    "requeue_job": ("pod",),
    "rebalance": ("node",),
    "scale_node_pool": ("pool",),
    "replace_machine": ("node", "device"),
    "repartition": ("node", "device"),
    "reset_devices": ("node", "device"),
    "reboot_node": ("node", "device"),
    "mark_for_return": ("node", "device"),
    "uncordon": ("node",),
}


# What the actions share (ops/ is a package of it); every other module of
# autoscaler.actions is one action.
SHARED = {"base", "context", "ops"}


def test_the_registry_lists_every_action_file_once() -> None:
    modules = {
        m.name
        for m in pkgutil.iter_modules(autoscaler.actions.__path__)
        if m.name not in SHARED and not m.name.startswith("_")
    }
    assert set(ACTIONS) == modules
    for name, spec in ACTIONS.items():
        module = importlib.import_module(f"autoscaler.actions.{name}")
        assert spec is module.SPEC
        assert spec.name == name == module.NAME
        assert set(spec.targets) <= set(TARGETS)
        assert spec.targets == TARGETS_OF[name]
        # Each parameter is documented in its file's docstring.
        doc = module.__doc__ or ""
        for key in spec.keys:
            assert f"``{key}``" in doc, (name, key)
        assert "Targets:" in doc


@pytest.mark.parametrize(("name", "expected"), sorted(DEFAULTS.items()))
def test_defaults_fill_every_parameter(name: str, expected: dict[str, Any]) -> None:
    params, problems = ACTIONS[name].validate({})
    assert problems == []
    assert params == expected


def test_only_undoable_actions_take_recover() -> None:
    assert {n for n, s in ACTIONS.items() if s.reversible} == {
        "cordon",
        "taint",
        "drain",
        "migrate_jobs",
        "reset_devices",
        "reboot_node",
        "repartition",
    }


VALID: list[tuple[str, str, Mapping[str, Any], dict[str, Any]]] = [
    # (description, action, raw, params expected)
    (
        "taint with a value and each effect",
        "taint",
        {"taint": "example.com/gpu=bad:NoExecute"},
        {"taint": "example.com/gpu=bad:NoExecute"},
    ),
    (
        "taint without a value",
        "taint",
        {"taint": "gpu-broken:PreferNoSchedule"},
        {"taint": "gpu-broken:PreferNoSchedule"},
    ),
    (
        "drain with every parameter",
        "drain",
        {"drainTimeout": "1h30m", "gracePeriodSeconds": 0, "podSelector": "app=train,tier!=x"},
        {
            "drainTimeout": 5400.0,
            "gracePeriodSeconds": 0,
            "podSelector": "app=train,tier!=x",
            "forceDeleteAfterTimeout": False,
        },
    ),
    (
        "drain with set-based selectors",
        "drain",
        {"podSelector": "team in (ml, research),!canary,accel-fleet.io/job"},
        {
            "drainTimeout": 600.0,
            "gracePeriodSeconds": None,
            "podSelector": "team in (ml, research),!canary,accel-fleet.io/job",
            "forceDeleteAfterTimeout": False,
        },
    ),
    (
        "migrate_jobs for one device",
        "migrate_jobs",
        {"deviceOnly": True, "drainTimeout": "2m"},
        {"taint": DEFAULT_TAINT, "drainTimeout": 120.0, "deviceOnly": True},
    ),
    (
        "requeue_job with no requeues at all",
        "requeue_job",
        {"maxRequeues": 0, "backoff": "0s"},
        {"maxRequeues": 0, "backoff": 0.0, "maxBackoff": 3600.0, "via": "delete"},
    ),
    (
        "rebalance with an integer gap",
        "rebalance",
        {"maxMovesPerCycle": 3, "minUtilizationGap": 1},
        {
            "maxMovesPerCycle": 3,
            "minUtilizationGap": 1.0,
            "nodeCooldown": 1800.0,
            "gainHorizon": 3600.0,
        },
    ),
    (
        "scale down by two",
        "scale_node_pool",
        {"direction": "down", "step": 2},
        {
            "direction": "down",
            "step": 2,
            "spareFaultRate": 0.0,
            "spareFaultRateQuery": None,
            "provisioningTime": 600.0,
            "restartOverhead": 600.0,
            "spareQuantile": 0.999,
            "maxSpares": 8,
        },
    ),
    (
        "scale up by the default step",
        "scale_node_pool",
        {"direction": "up"},
        {
            "direction": "up",
            "step": 1,
            "spareFaultRate": 0.0,
            "spareFaultRateQuery": None,
            "provisioningTime": 600.0,
            "restartOverhead": 600.0,
            "spareQuantile": 0.999,
            "maxSpares": 8,
        },
    ),
    (
        "a null parameter means its default",
        "requeue_job",
        {"maxRequeues": None},
        {"maxRequeues": 3, "backoff": 60.0, "maxBackoff": 3600.0, "via": "delete"},
    ),
]


@pytest.mark.parametrize(
    ("action", "raw", "expected"),
    [pytest.param(a, r, e, id=d) for d, a, r, e in VALID],
)
def test_valid_parameters(action: str, raw: Mapping[str, Any], expected: dict[str, Any]) -> None:
    params, problems = ACTIONS[action].validate(raw)
    assert problems == []
    assert params == expected


INVALID: list[tuple[str, str, Mapping[str, Any], list[str]]] = [
    # (description, action, raw, every problem as "param: message")
    (
        "cordon takes no parameters",
        "cordon",
        {"reason": "x"},
        ["reason: unknown parameter: cordon takes no parameters"],
    ),
    (
        "a misspelt parameter gets a suggestion and the list",
        "drain",
        {"drainTimout": "5m"},
        [
            "drainTimout: unknown parameter for drain; did you mean 'drainTimeout'? "
            "(drain takes drainTimeout, gracePeriodSeconds, podSelector, "
            "forceDeleteAfterTimeout)"
        ],
    ),
    (
        "taint: no effect",
        "taint",
        {"taint": "accel-fleet.io/faulty=true"},
        [
            "taint: 'accel-fleet.io/faulty=true' has no effect (use key=value:Effect, "
            "e.g. accel-fleet.io/faulty=true:NoSchedule)"
        ],
    ),
    (
        "taint: bad effect, key and value all reported",
        "taint",
        {"taint": "-bad key=no way:NoScheduled"},
        [
            "taint: '-bad key=no way:NoScheduled': invalid key '-bad key'",
            "taint: '-bad key=no way:NoScheduled': invalid value 'no way'",
            "taint: '-bad key=no way:NoScheduled': effect must be NoSchedule, "
            "PreferNoSchedule, NoExecute, got 'NoScheduled'; did you mean 'NoSchedule'?",
        ],
    ),
    (
        "taint: a bad prefix",
        "taint",
        {"taint": "Accel_Fleet/faulty:NoSchedule"},
        ["taint: 'Accel_Fleet/faulty:NoSchedule': invalid key prefix 'Accel_Fleet'"],
    ),
    (
        "taint must be a string",
        "taint",
        {"taint": 3},
        ["taint: must be a string, got 3"],
    ),
    (
        "drain: every bad parameter at once",
        "drain",
        {"drainTimeout": "0s", "gracePeriodSeconds": -1, "podSelector": "app==,in (a)"},
        [
            "drainTimeout: must be longer than 0s, got '0s'",
            "gracePeriodSeconds: must be at least 0, got -1",
            "podSelector: 'in (a)' is not a label selector requirement",
        ],
    ),
    (
        "drain: durations need units and whole numbers are whole",
        "drain",
        {"drainTimeout": 600, "gracePeriodSeconds": 2.5},
        [
            "drainTimeout: 600 has no unit (use e.g. 600s or 600m)",
            "gracePeriodSeconds: must be a whole number, got 2.5",
        ],
    ),
    (
        "drain: an empty set and a bad label value in a selector",
        "drain",
        {"podSelector": "team in (),app=bad value!"},
        [
            "podSelector: 'team in ()': an 'in'/'notin' set needs at least one value",
            "podSelector: 'app=bad value!' is not a label selector requirement",
        ],
    ),
    (
        "migrate_jobs: deviceOnly is a boolean, the taint is validated",
        "migrate_jobs",
        {"deviceOnly": "true", "taint": "x:Never"},
        [
            "taint: 'x:Never': effect must be NoSchedule, PreferNoSchedule, NoExecute, got 'Never'",
            "deviceOnly: must be true or false, got 'true'",
        ],
    ),
    (
        "requeue_job: negative requeues, negative backoff",
        "requeue_job",
        {"maxRequeues": -1, "backoff": "-1m"},
        [
            "maxRequeues: must be at least 0, got -1",
            "backoff: must not be negative, got '-1m'",
        ],
    ),
    (
        "requeue_job: booleans are not numbers",
        "requeue_job",
        {"maxRequeues": True},
        ["maxRequeues: must be a whole number, got True"],
    ),
    (
        "rebalance: at least one move, a gap within 0-1",
        "rebalance",
        {"maxMovesPerCycle": 0, "minUtilizationGap": 1.5},
        [
            "maxMovesPerCycle: must be at least 1, got 0",
            "minUtilizationGap: must be from 0 to 1, got 1.5",
        ],
    ),
    (
        "rebalance: a gap that is not a number",
        "rebalance",
        {"minUtilizationGap": "20%"},
        ["minUtilizationGap: must be a number from 0 to 1, got '20%'"],
    ),
    (
        "scale_node_pool: direction is required",
        "scale_node_pool",
        {"step": 1},
        ["direction: missing: scale_node_pool needs direction up or down"],
    ),
    (
        "scale_node_pool: a spare buffer with every parameter wrong",
        "scale_node_pool",
        {
            "direction": "up",
            "spareFaultRate": -1,
            "spareQuantile": 0.2,
            "spareFaultRateQuery": "sum(",
            "maxSpares": -1,
        },
        [
            "spareFaultRateQuery: not a PromQL expression: unclosed left parenthesis",
            "spareFaultRate: must be a finite number of at least 0, got -1",
            "spareQuantile: must be from 0.5 to 0.999999, got 0.2",
            "maxSpares: must be at least 0, got -1",
        ],
    ),
    (
        "scale_node_pool: a bad direction and a zero step",
        "scale_node_pool",
        {"direction": "upp", "step": 0},
        [
            "direction: must be up or down, got 'upp'; did you mean 'up'?",
            "step: must be at least 1, got 0",
        ],
    ),
]


@pytest.mark.parametrize(
    ("action", "raw", "expected"),
    [pytest.param(a, r, e, id=d) for d, a, r, e in INVALID],
)
def test_invalid_parameters_report_every_problem(
    action: str, raw: Mapping[str, Any], expected: list[str]
) -> None:
    params, problems = ACTIONS[action].validate(raw)
    got = [str(p) for p in problems]
    assert len(got) == len(expected), got
    for line, want in zip(got, expected, strict=True):
        assert line.startswith(want), (line, want)
    # A bad parameter falls back to its default, so the mapping is always complete.
    assert set(params) == set(ACTIONS[action].keys)


def test_check_target_only_objects_to_device_only_on_a_node() -> None:
    spec = ACTIONS["migrate_jobs"]
    params, _ = spec.validate({"deviceOnly": True})
    assert spec.check_target(params, "device") == []
    assert [str(p) for p in spec.check_target(params, "node")] == [
        "deviceOnly: needs target device; this rule's target is node"
    ]
    plain, _ = spec.validate({})
    assert spec.check_target(plain, "node") == []
    assert ACTIONS["cordon"].check_target({}, "node") == []


def test_params_round_trip_to_their_dataclass() -> None:
    params, _ = ACTIONS["drain"].validate({"drainTimeout": "2m", "podSelector": "app=x"})
    assert from_params(DrainParams, params) == DrainParams(120.0, None, "app=x")
    params, _ = ACTIONS["migrate_jobs"].validate({"deviceOnly": True})
    assert from_params(MigrateJobsParams, params).device_only is True
    params, _ = ACTIONS["scale_node_pool"].validate({"direction": "down"})
    assert from_params(ScaleNodePoolParams, params) == ScaleNodePoolParams("down", 1)
    assert param_keys(ScaleNodePoolParams) == (
        "direction",
        "step",
        "spareFaultRate",
        "spareFaultRateQuery",
        "provisioningTime",
        "restartOverhead",
        "spareQuantile",
        "maxSpares",
    )


def test_parse_taint() -> None:
    assert parse_taint(DEFAULT_TAINT) == Taint("accel-fleet.io/faulty", "true", "NoSchedule")
    assert parse_taint("gpu:NoExecute") == Taint("gpu", "", "NoExecute")
    assert str(parse_taint("gpu:NoExecute")) == "gpu:NoExecute"
    assert str(parse_taint(DEFAULT_TAINT)) == DEFAULT_TAINT
    with pytest.raises(ValueError, match="effect must be"):
        parse_taint("gpu:Sometimes")
    assert taint_problems("a" * 64 + ":NoSchedule") != []
    assert taint_problems("k=" + "v" * 64 + ":NoSchedule") != []


@pytest.mark.parametrize(
    "selector",
    ["", "app", "!app", "app=x", "app==x", "app!=x", "app in (a,b)", "app notin (a)", "a=,b"],
)
def test_selectors_kubernetes_accepts(selector: str) -> None:
    assert selector_problems(selector) == []


@pytest.mark.parametrize("selector", ["app=x=y", "in (a)", "app in a", "=x", "app=(x)"])
def test_selectors_kubernetes_refuses(selector: str) -> None:
    assert selector_problems(selector) != []


@pytest.mark.parametrize(
    ("value", "seconds"),
    [("30s", 30.0), ("5m", 300.0), ("1h30m", 5400.0), ("500ms", 0.5), (0, 0.0), ("0s", 0.0)],
)
def test_duration_seconds(value: object, seconds: float) -> None:
    assert duration_seconds(value) == seconds


@pytest.mark.parametrize(
    ("value", "message"),
    [
        (5, "5 has no unit"),
        (-1, "must not be negative"),
        ("-5m", "must not be negative"),
        ("5 m", "invalid duration '5 m'"),
        (True, "invalid duration True"),
        ([1], "invalid duration [1]"),
    ],
)
def test_duration_seconds_refuses(value: object, message: str) -> None:
    with pytest.raises(ValueError, match=message.replace("[", r"\[").replace("]", r"\]")):
        duration_seconds(value)
