"""The floors: no module of albert_tf imports from a floor above its own, nor from a peer on its
floor (no task imports another task); and no circle among its modules, inside a unit too (each
module stands above what it uses). Read from the source with an AST pass, so imports inside
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
    "cpu_bf16": 0, "errors": 0, "fileio": 0, "fused": 0, "keras": 0, "lazy": 0, "processes": 0, "progress": 0,
    "startup": 0,
    "config": 1, "demo_data": 1, "run_lock": 1, "versions": 1,
    "tokenization": 2,
    "modeling": 3,
    "weights": 4,
    "data": 5,
    "training": 6, "pretraining_data": 6,  # the pretraining-data tool (create_pretraining_data.py)
    "vocab_check": 6,  # the tokenizer and the pretraining data against the config (reads TFRecord framing)
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


def module_graph(package: pathlib.Path) -> dict[str, set[str]]:
    """Module -> the modules of the package it imports (``albert_tf.a.b`` names; a package is
    its ``__init__``). An imported name resolves to the longest module it lies in, so
    ``from albert_tf.weights.names import ARCHITECTURES`` is an edge to ``albert_tf.weights.names``."""
    modules = {}
    for path in sorted(package.rglob("*.py")):
        parts = path.relative_to(package.parent).with_suffix("").parts
        modules[".".join(parts[:-1] if parts[-1] == "__init__" else parts)] = path

    def resolve(name: str) -> str | None:
        parts = name.split(".")
        for end in range(len(parts), 0, -1):
            if ".".join(parts[:end]) in modules:
                return ".".join(parts[:end])
        return None

    return {module: {target for name in imported_modules(path.read_text(encoding="utf-8"))
                     for target in [resolve(name)] if target not in (None, module)}
            for module, path in modules.items()}


def circles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The import circles of a graph: each strongly connected group of two or more modules,
    sorted (Tarjan's algorithm, iterative: no recursion limit on a deep package)."""
    index, low, on_stack, stack, found = {}, {}, set(), [], []
    for root in sorted(graph):
        if root in index:
            continue
        work = [(root, iter(sorted(graph[root])))]
        index[root] = low[root] = len(index)
        stack.append(root), on_stack.add(root)
        while work:
            node, targets = work[-1]
            target = next(targets, None)
            if target is not None:
                if target not in index:
                    index[target] = low[target] = len(index)
                    stack.append(target), on_stack.add(target)
                    work.append((target, iter(sorted(graph.get(target, ())))))
                elif target in on_stack:
                    low[node] = min(low[node], index[target])
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[node])
            if low[node] == index[node]:
                group = []
                while True:
                    member = stack.pop()
                    on_stack.discard(member)
                    group.append(member)
                    if member == node:
                        break
                if len(group) > 1:
                    found.append(sorted(group))
    return sorted(found)


def test_no_circle_among_the_modules():
    found = circles(module_graph(PACKAGE))
    assert not found, f"these modules import each other (directly or around a circle): {found}"


def test_the_check_finds_a_circle(tmp_path):
    """A package shaped like the old weights/ (hf -> names -> kinds -> hf and names, one import
    hidden in a function) is reported as one circle; cut the function's import and none is."""
    weights = tmp_path / "albert_tf" / "weights"
    weights.mkdir(parents=True)
    (tmp_path / "albert_tf" / "__init__.py").write_text("")
    (weights / "__init__.py").write_text("from albert_tf.weights.errors import CheckpointError\n")
    (weights / "errors.py").write_text("class CheckpointError(Exception):\n    pass\n")
    (weights / "hf.py").write_text("from albert_tf.weights import names as name_table\n"
                                   "from albert_tf.weights.errors import CheckpointError\nARCHITECTURES = {}\n")
    (weights / "kinds.py").write_text("from albert_tf.weights import hf, names\n")
    names = "def tf1_name_map(model):\n    from albert_tf.weights import kinds\n    return kinds\n"
    (weights / "names.py").write_text(names)
    assert circles(module_graph(tmp_path / "albert_tf")) == [
        ["albert_tf.weights.hf", "albert_tf.weights.kinds", "albert_tf.weights.names"]]
    (weights / "names.py").write_text(names.replace("from albert_tf.weights import kinds", "kinds = None"))
    assert circles(module_graph(tmp_path / "albert_tf")) == []
