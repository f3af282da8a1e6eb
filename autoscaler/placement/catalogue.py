"""The device catalogue: peak FLOP/s by model and precision, read from devices.yaml.

The estimated run time of a job is its FLOPs divided by what the devices can do,
and "what they can do" has to come from somewhere that cites its figures: vendor
datasheets, each entry with its URL. The exporter's ``model`` label is matched
against each entry's ``match`` substrings (longest wins), so a catalogue entry
covers every way a driver spells the name ("NVIDIA H100 80GB HBM3", "H100 SXM").
Entries may also give the device's memory and its links (``memory_gb``,
``interconnect``), for people comparing pools; the scorer ranks by FLOPs alone.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path
from typing import Any

import yaml

from accel_common.names import VENDOR_RESOURCE

PRECISIONS: tuple[str, ...] = ("fp64", "fp32", "tf32", "bf16", "fp16", "fp8")
DEFAULT_PRECISION = "bf16"
CATALOGUE_PATH = Path(__file__).with_name("devices.yaml")
TERA = 1e12
GIGA = 1e9


class CatalogueError(ValueError):
    """devices.yaml is malformed; the message names the entry."""


@dataclass(frozen=True)
class DeviceModel:
    name: str
    vendor: str
    match: tuple[str, ...]
    # Per device as the driver enumerates it (package figure / devices_per_package).
    peak_flops: Mapping[str, float]
    source: str
    # Device memory in bytes (0: not catalogued), and its links in words.
    memory_bytes: float = 0.0
    interconnect: str = ""


@dataclass(frozen=True)
class Catalogue:
    models: tuple[DeviceModel, ...]

    def lookup(self, model: str) -> DeviceModel | None:
        """The entry whose longest ``match`` substring occurs in ``model``."""
        text = model.lower()
        best: tuple[int, DeviceModel] | None = None
        for entry in self.models:
            for needle in entry.match:
                if needle.lower() in text and (best is None or len(needle) > best[0]):
                    best = (len(needle), entry)
        return best[1] if best else None

    def peak(self, model: str, precision: str) -> float | None:
        """Peak FLOP/s of one device of ``model`` at ``precision``, or None when the
        model or the precision is not catalogued."""
        entry = self.lookup(model)
        if entry is None:
            return None
        return entry.peak_flops.get(precision)


def _entry(i: int, raw: Any, where: str) -> DeviceModel:
    if not isinstance(raw, dict):
        raise CatalogueError(f"{where}: models[{i}] must be a mapping")
    name = raw.get("name")
    match = raw.get("match")
    peaks = raw.get("peak_tflops")
    source = raw.get("source")
    label = f"{where}: models[{i}] ({name or 'no name'})"
    if not isinstance(name, str) or not name:
        raise CatalogueError(f"{label}: needs a name")
    if not isinstance(match, list) or not all(isinstance(m, str) and m for m in match):
        raise CatalogueError(f"{label}: match must be a list of model-name substrings")
    if not isinstance(source, str) or "http" not in source:
        raise CatalogueError(f"{label}: every entry cites its source with a URL")
    if not isinstance(peaks, dict) or not peaks:
        raise CatalogueError(f"{label}: peak_tflops must map precision to TFLOP/s")
    per_package = raw.get("devices_per_package", 1)
    if not isinstance(per_package, int) or per_package < 1:
        raise CatalogueError(f"{label}: devices_per_package must be a positive integer")
    flops: dict[str, float] = {}
    for precision, value in peaks.items():
        if precision not in PRECISIONS:
            raise CatalogueError(
                f"{label}: unknown precision {precision!r} (use {', '.join(PRECISIONS)})"
            )
        if not isinstance(value, int | float) or value <= 0:
            raise CatalogueError(f"{label}: peak_tflops.{precision} must be a positive number")
        flops[precision] = float(value) * TERA / per_package
    vendor = str(raw.get("vendor", ""))
    if vendor and vendor not in VENDOR_RESOURCE:
        raise CatalogueError(
            f"{label}: unknown vendor {vendor!r} (use the exporter's vendor label: "
            f"{', '.join(VENDOR_RESOURCE)})"
        )
    memory = raw.get("memory_gb", 0)
    if isinstance(memory, bool) or not isinstance(memory, int | float) or memory < 0:
        raise CatalogueError(f"{label}: memory_gb must be a non-negative number of GB")
    interconnect = raw.get("interconnect", "")
    if not isinstance(interconnect, str):
        raise CatalogueError(f"{label}: interconnect must be text (e.g. 'hccs: full mesh')")
    return DeviceModel(
        name,
        vendor,
        tuple(match),
        flops,
        source,
        # Per device, like the FLOPs: a 910C package's 128 GB is 64 GB per die.
        memory_bytes=float(memory) * GIGA / per_package,
        interconnect=interconnect,
    )


def load_catalogue(path: Path = CATALOGUE_PATH) -> Catalogue:
    """Reads and checks a catalogue file; raises CatalogueError naming the entry."""
    try:
        raw = yaml.safe_load(path.read_text())
    except (OSError, yaml.YAMLError) as e:
        raise CatalogueError(f"{path}: cannot read the device catalogue: {e}") from e
    models = raw.get("models") if isinstance(raw, dict) else None
    if not isinstance(models, list):
        raise CatalogueError(f"{path}: expected a top-level 'models:' list")
    return Catalogue(tuple(_entry(i, m, str(path)) for i, m in enumerate(models)))


@lru_cache(maxsize=1)
def default_catalogue() -> Catalogue:
    """The shipped catalogue, read once."""
    return load_catalogue()
