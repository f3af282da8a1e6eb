"""What every dashboard is built from: the template variables, panels, the layout.

``dashboards/generate.py`` writes the dashboards; the dashboards share these, so that
a variable, a filter or a panel's shape is written once (see that module for why the
dashboards are generated). Conventions every panel follows:

- Every selector carries ``FILTER`` (cluster, node, vendor), written with ``=~`` so
  that "All" (``.*``) also matches series that lack the label: a single Prometheus
  usually has no ``cluster`` label at all, and the dashboards still work there.
- Per-device series join ``accel_device_info`` on ``uuid`` (unique per device and per
  partition, as docs/exporter/pods.md does) to get ``model``; the
  fleet-wide panels keep whole devices only (``parent=""``), so that a GPU and its
  MIG instances are not counted twice.
"""

from __future__ import annotations

from typing import Any

Json = dict[str, Any]
SCHEMA_VERSION = 39
DS: Json = {"type": "prometheus", "uid": "${datasource}"}

# The label filter that every device selector carries.
FILTER = 'cluster=~"$cluster", node=~"$node", vendor=~"$vendor"'
CLUSTER = 'cluster=~"$cluster"'


def whole_devices_model() -> str:
    """``model`` for whole devices (not partitions), for a ``group_left`` join."""
    return f'max by (uuid, model) (accel_device_info{{{FILTER}, parent=""}})'


def by_model(expr: str) -> str:
    """``expr`` (per-device series) with the device's ``model`` label added."""
    return f"{expr} * on (uuid) group_left (model) {whole_devices_model()}"


# --- template variables -------------------------------------------------------------


def datasource_variable() -> Json:
    return {
        "name": "datasource",
        "label": "Data source",
        "type": "datasource",
        "query": "prometheus",
        "current": {},
        "hide": 0,
        "includeAll": False,
        "multi": False,
        "options": [],
        "refresh": 1,
        "regex": "",
    }


def query_variable(
    name: str, label: str, query: str, *, include_all: bool = True, multi: bool = True
) -> Json:
    """A ``label_values(...)`` variable, refreshed when the time range changes.

    ``allValue`` is ``.*`` rather than Grafana's default alternation of every value,
    so that "All" also matches series without the label and stays short on a big
    fleet."""
    var: Json = {
        "name": name,
        "label": label,
        "type": "query",
        "datasource": DS,
        "definition": query,
        # The classic string form: every Grafana since 7 reads it as written.
        "query": query,
        "current": {},
        "hide": 0,
        "includeAll": include_all,
        "multi": multi,
        "options": [],
        "refresh": 2,
        "regex": "",
        "sort": 1,
    }
    if include_all:
        var["allValue"] = ".*"
    return var


def variables(single_node: bool = False) -> list[Json]:
    """The four filters every dashboard has; Node detail picks exactly one node."""
    return [
        datasource_variable(),
        query_variable("cluster", "Cluster", "label_values(accel_up, cluster)"),
        query_variable(
            "node",
            "Node",
            f"label_values(accel_up{{{CLUSTER}}}, node)",
            include_all=not single_node,
            multi=not single_node,
        ),
        query_variable(
            "vendor", "Vendor", f'label_values(accel_up{{{CLUSTER}, node=~"$node"}}, vendor)'
        ),
        query_variable(
            "namespace",
            "Namespace",
            f"label_values(accel_device_pod_info{{{FILTER}}}, namespace)",
        ),
    ]


# --- panels -------------------------------------------------------------------------


def target(expr: str, legend: str = "", *, instant: bool = False, ref: str = "A") -> Json:
    return {
        "datasource": DS,
        "editorMode": "code",
        "expr": expr,
        "legendFormat": legend or "__auto",
        "range": not instant,
        "instant": instant,
        "format": "time_series",
        "refId": ref,
    }


def targets(*pairs: tuple[str, str], instant: bool = False) -> list[Json]:
    return [
        target(expr, legend, instant=instant, ref=chr(ord("A") + i))
        for i, (expr, legend) in enumerate(pairs)
    ]


def panel(kind: str, title: str, description: str, tgts: list[Json], **extra: Any) -> Json:
    """A panel without position; ``Layout`` places it."""
    unit = extra.pop("unit", None)
    defaults: Json = {}
    if unit:
        defaults["unit"] = unit
    for key in ("min", "max", "decimals", "thresholds", "mappings", "color", "custom"):
        if key in extra:
            defaults[key] = extra.pop(key)
    return {
        "type": kind,
        "title": title,
        "description": description,
        "datasource": DS,
        "targets": tgts,
        "fieldConfig": {"defaults": defaults, "overrides": extra.pop("overrides", [])},
        "options": extra.pop("options", {}),
        **extra,
    }


def timeseries(title: str, description: str, tgts: list[Json], **extra: Any) -> Json:
    extra.setdefault("options", {"legend": {"displayMode": "table", "placement": "right"}})
    return panel("timeseries", title, description, tgts, **extra)


def stat(title: str, description: str, expr: str, **extra: Any) -> Json:
    extra.setdefault("options", {"reduceOptions": {"calcs": ["lastNotNull"]}})
    return panel("stat", title, description, [target(expr, instant=True)], **extra)


def as_table(tgts: list[Json]) -> list[Json]:
    """Table format: one row per series, one column per label."""
    for t in tgts:
        t["format"] = "table"
    return tgts


def table(title: str, description: str, tgts: list[Json], **extra: Any) -> Json:
    """An instant-query table; the ``Time`` column is hidden, series become rows."""
    as_table(tgts)
    transformations = extra.pop("transformations", [])
    hide = {"Time": True, "__name__": True, **extra.pop("hide", {})}
    transformations.append(
        {"id": "organize", "options": {"excludeByName": hide, "renameByName": {}}}
    )
    if len(tgts) > 1:
        transformations.insert(0, {"id": "merge", "options": {}})
    return panel("table", title, description, tgts, transformations=transformations, **extra)


RED_WHEN_ONE = {
    "mode": "absolute",
    "steps": [{"color": "green", "value": None}, {"color": "red", "value": 1}],
}


class Layout:
    """Places panels left to right in rows of 24 grid units, with row headers."""

    def __init__(self) -> None:
        self.panels: list[Json] = []
        self.x = 0
        self.y = 0
        self.row_h = 0

    def row(self, title: str) -> None:
        self._newline()
        self.panels.append(
            {
                "type": "row",
                "title": title,
                "collapsed": False,
                "panels": [],
                "gridPos": {"h": 1, "w": 24, "x": 0, "y": self.y},
            }
        )
        self.y += 1

    def add(self, p: Json, w: int = 12, h: int = 8) -> None:
        if self.x + w > 24:
            self._newline()
        p["gridPos"] = {"h": h, "w": w, "x": self.x, "y": self.y}
        self.panels.append(p)
        self.x += w
        self.row_h = max(self.row_h, h)

    def _newline(self) -> None:
        if self.x:
            self.y += self.row_h
        self.x, self.row_h = 0, 0

    def numbered(self) -> list[Json]:
        for i, p in enumerate(self.panels, start=1):
            p["id"] = i
        return self.panels


def dashboard(uid: str, title: str, description: str, layout: Layout, **extra: Any) -> Json:
    more_variables: list[Json] = extra.pop("more_variables", [])
    return {
        "uid": uid,
        "title": title,
        "description": description,
        "tags": ["accel-fleet"],
        "timezone": "browser",
        "editable": True,
        "graphTooltip": 1,
        "refresh": "30s",
        "time": {"from": extra.pop("time_from", "now-6h"), "to": "now"},
        "timepicker": {},
        "schemaVersion": SCHEMA_VERSION,
        "version": 1,
        "annotations": {"list": []},
        "links": [
            {
                "type": "dashboards",
                "tags": ["accel-fleet"],
                "asDropdown": True,
                "title": "accel-fleet",
                "includeVars": True,
                "keepTime": True,
            }
        ],
        "templating": {"list": variables(**extra) + more_variables},
        "panels": layout.numbered(),
    }
