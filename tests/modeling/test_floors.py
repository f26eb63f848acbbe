"""The floors: no module of albert_tf imports from a floor above its own, nor from a peer on its
floor (no task imports another task). Read from the source with an AST pass, so imports inside
functions and lazily imported names (``"albert_tf.x.y"`` strings of the packages' name tables)
count as much as those at the top of a module."""
import ast
import pathlib
import re

import pytest

PACKAGE = pathlib.Path(__file__).resolve().parents[2] / "albert_tf"

# Each unit of the package (a subpackage or a top-level module) and its floor, lowest first. A unit
# may import from lower floors only; units on one floor are peers and import nothing of each other.
FLOORS = {
    "errors": 0, "fileio": 0, "fused": 0, "keras": 0, "lazy": 0, "startup": 0,
    "config": 1, "demo_data": 1,
    "tokenization": 2,
    "modeling": 3,
    "weights": 4, "vocab_check": 4,
    "data": 5,
    "training": 6,
    "finetuning": 7,  # the task interface and the one runner
    "glue": 8, "race": 8, "squad": 8, "pretraining": 8,  # the tasks: peers
    "conversion": 9, "export": 9,  # above the tasks: walk their registry, export their models
    "pretrained": 10,  # from_pretrained: opens any checkpoint through the converter's reading
    "cli": 11, "albert_tf": 11, "demo": 11,  # the package's public API, the drivers' plumbing
    "drivers": 12,
}
NAME = re.compile(r"albert_tf(\.\w+)+")


def _unit(module: str) -> str:
    """``albert_tf.glue.task`` -> ``glue``; ``albert_tf`` (the package's own namespace) -> ``albert_tf``."""
    parts = module.split(".")
    if len(parts) == 1:
        return "albert_tf"
    first = parts[1]
    is_module = (PACKAGE / first).is_dir() or (PACKAGE / f"{first}.py").is_file()
    return first if is_module else "albert_tf"  # `from albert_tf import AlbertConfig`: the public API


def imported_modules(source: str) -> set[str]:
    """Every albert_tf module a source imports, wherever the import is, and every albert_tf module
    named by a string (the lazy name tables)."""
    found = set()
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            found.update(f"{node.module}.{alias.name}" for alias in node.names)
        elif isinstance(node, ast.Constant) and isinstance(node.value, str) and NAME.fullmatch(node.value):
            found.add(node.value)
    return {name for name in found if name == "albert_tf" or name.startswith("albert_tf.")}


def violations(unit: str, source: str) -> list[str]:
    """The imports of ``source`` (a module of ``unit``) that break the floors."""
    bad = []
    for name in sorted(imported_modules(source)):
        target = _unit(name)
        if target == unit:
            continue
        if target not in FLOORS:
            bad.append(f"{name}: unit {target!r} has no floor in FLOORS")
        elif FLOORS[target] >= FLOORS[unit]:
            bad.append(f"{name} ({target}, floor {FLOORS[target]})")
    return bad


def _units():
    for path in sorted(PACKAGE.rglob("*.py")):
        relative = path.relative_to(PACKAGE)
        unit = "albert_tf" if relative == pathlib.Path("__init__.py") else relative.parts[0].removesuffix(".py")
        yield unit, path


def test_every_unit_has_a_floor():
    missing = sorted({unit for unit, _ in _units()} - set(FLOORS))
    assert not missing, f"add these units of albert_tf to FLOORS: {missing}"


@pytest.mark.parametrize("floor_unit", sorted({unit for unit in FLOORS if unit != "drivers"}))
def test_a_floor_imports_nothing_from_above_or_beside(floor_unit):
    broken = {str(path.relative_to(PACKAGE)): bad for unit, path in _units() if unit == floor_unit
              for bad in [violations(unit, path.read_text(encoding="utf-8"))] if bad}
    assert not broken, f"{floor_unit} (floor {FLOORS[floor_unit]}) imports from its floor or above: {broken}"


def test_the_check_sees_imports_inside_functions_and_name_tables():
    """The AST pass is what the floors rest on: an upward import hidden in a function body, a
    peer task's import and a lazy name table's string are each caught."""
    hidden = "def f():\n    from albert_tf.training.loop import Trainer\n    return Trainer\n"
    assert violations("modeling", hidden) == ["albert_tf.training.loop.Trainer (training, floor 6)"]
    assert violations("race", "import albert_tf.glue.features\n") == ["albert_tf.glue.features (glue, floor 8)"]
    assert violations("data", '_PUBLIC = {"x": "albert_tf.training.loop"}\n') == [
        "albert_tf.training.loop (training, floor 6)"]
    assert violations("training", "from albert_tf.data import datasets\n") == []
