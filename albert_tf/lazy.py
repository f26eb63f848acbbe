"""Lazy public names for the package's ``__init__`` modules: a name is imported from its module on
first use, so light modules (tokenization, readers, results) load no TensorFlow."""
from __future__ import annotations

import importlib
from typing import Any, Callable, Mapping


def lazy_exports(package: str, table: Mapping[str, str]) -> tuple[list[str], Callable[[str], Any]]:
    """``(__all__, __getattr__)`` for ``package`` whose public names live in the modules ``table`` names."""

    def getattr_(name: str) -> Any:
        if name in table:
            return getattr(importlib.import_module(table[name]), name)
        raise AttributeError(f"module {package!r} has no attribute {name!r}")

    return sorted(table), getattr_
