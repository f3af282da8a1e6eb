"""The backend registry: one line per backend, each implemented in its own file.

Modules are named, not imported, here: importing a backend module must never be the
thing that fails on a host without that vendor's library.
"""

from __future__ import annotations

import importlib

from exporter.backends.base import Backend, BackendOptions

REGISTRY: dict[str, str] = {
    "nvidia": "exporter.backends.nvidia:NvidiaBackend",
    "amd": "exporter.backends.amd:AmdBackend",
    "oneapi": "exporter.backends.oneapi:OneapiBackend",
    "ascend": "exporter.backends.ascend:AscendBackend",
    "gaudi": "exporter.backends.gaudi:GaudiBackend",
    "tpu": "exporter.backends.tpu:TpuBackend",
    "cpu": "exporter.backends.cpu:CpuBackend",
    "kubelet": "exporter.backends.kubelet:KubeletBackend",
    "sim": "exporter.backends.sim:SimBackend",
}


def backend_class(name: str) -> type[Backend]:
    module_name, _, attr = REGISTRY[name].partition(":")
    cls = getattr(importlib.import_module(module_name), attr)
    if not (isinstance(cls, type) and issubclass(cls, Backend)):
        raise TypeError(f"{REGISTRY[name]} is not a Backend")
    return cls


def default_backends() -> list[str]:
    """The hardware backends, which a plain ``accel-exporter`` polls."""
    return [n for n in REGISTRY if backend_class(n).hardware]


def create(name: str, options: BackendOptions) -> Backend:
    return backend_class(name)(options)


__all__ = ["REGISTRY", "Backend", "BackendOptions", "backend_class", "create", "default_backends"]
