"""The package's layers, read from the source: no module imports a layer above its own, nothing
imports in a circle, and the package docstring's map lists every module where it lives.

Layers, bottom to top: common → core → training → beyond → course → cli (training/, course/ and cli/ hold subpackages,
the rooms, and modules; a room is part of its layer). A module may import its
own layer and those below (a function-level import counts as much as one at the top: it runs too).
"""

import ast
import re
from pathlib import Path

import pytest

import grpo_edu
from grpo_edu import course, training

ROOM_OF = {"course": course.ROOM_OF, "training": training.ROOM_OF}
"""{layer sorted into rooms: {module: its room}}."""

PACKAGE = Path(grpo_edu.__file__).parent
LAYERS = ("common", "core", "training", "beyond", "course", "cli")
RANK = {name: rank for rank, name in enumerate(LAYERS)}
DATA = "_bundle"
"""Not a layer: the lessons and bundled assets the wheel carries (no code; links in a checkout)."""


def _modules():
    """{'core.advantages': path, ..., 'cli': path} for every module but the package's __init__."""
    found = {}
    for path in sorted(PACKAGE.rglob("*.py")):
        parts = path.relative_to(PACKAGE).with_suffix("").parts
        if parts == ("__init__",) or parts[0] == DATA:
            continue
        found[".".join(parts[:-1] if parts[-1] == "__init__" else parts)] = path
    return found


MODULES = _modules()


def _layer(module):
    return module.split(".")[0]


def in_its_room(name):
    """'course.viz' or 'training.trainer' (paths from before the rooms, which still import) → 'course.aids.viz',
    'training.trainers.trainer'."""
    layer, _, rest = name.partition(".")
    head = rest.split(".")[0]
    rooms = ROOM_OF.get(layer, {})
    return f"{layer}.{rooms[head]}.{rest}" if head in rooms else name


def imported_modules(path):
    """The grpo_edu modules a file imports, as 'layer.module' (or 'layer' for a subpackage itself)."""
    targets = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            names = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            # `from grpo_edu.core import advantages` names a module; `from grpo_edu.core.kl import KINDS` a value
            names = [f"{node.module}.{alias.name}" for alias in node.names]
        else:
            continue
        for name in names:
            inside = in_its_room(name[len("grpo_edu."):]) if name.startswith("grpo_edu.") else ""
            while inside and inside not in MODULES:
                inside = inside.rpartition(".")[0]
            if inside:
                targets.add(inside)
    return targets


def _top_level_imports(path):
    """Lines that import from the package itself (`from grpo_edu import x`): inside the library,
    that goes through the lazy table in __init__ and hides the layer; name the module instead."""
    tree = ast.parse(path.read_text(encoding="utf-8"))
    return [node.lineno for node in ast.walk(tree)
            if isinstance(node, ast.ImportFrom) and node.level == 0 and node.module == "grpo_edu"
            or isinstance(node, ast.ImportFrom) and node.level > 0]


def upward_imports(modules=MODULES, read=imported_modules):
    """[(importer, imported)] where the imported module's layer is above the importer's."""
    return sorted((source, target) for source, path in modules.items() for target in read(path)
                  if RANK[_layer(target)] > RANK[_layer(source)])


def test_every_module_sits_in_a_layer():
    stray = [m for m in MODULES if _layer(m) not in RANK]
    assert not stray, f"modules outside the layers {LAYERS}: {stray}"
    assert {_layer(m) for m in MODULES} == set(LAYERS)


def test_no_module_imports_a_layer_above_its_own():
    assert upward_imports() == []


def test_the_check_sees_an_upward_import(tmp_path):
    """The check itself: a core module that imports the course's figures is reported."""
    bad = tmp_path / "advantages.py"
    bad.write_text("def f():\n    from grpo_edu.course import viz\n    from grpo_edu.training.trainers.config import GRPOConfig\n")
    assert upward_imports({"core.advantages": bad}) == [("core.advantages", "course.aids.viz"),
                                                         ("core.advantages", "training.trainers.config")]
    fine = tmp_path / "trainer.py"
    fine.write_text("from grpo_edu.core.losses import grpo_loss\nfrom grpo_edu.common import progress\n")
    assert upward_imports({"training.trainers.trainer": fine}) == []


def test_library_modules_name_the_module_they_import_from():
    offending = {m: lines for m, path in MODULES.items() if (lines := _top_level_imports(path))}
    assert not offending, f"`from grpo_edu import …` or a relative import inside the library: {offending}"


def test_no_import_cycles():
    graph = {m: {t for t in imported_modules(path) if t != m} for m, path in MODULES.items()}
    state = {}

    def visit(node, trail):
        if state.get(node) == "done":
            return
        if state.get(node) == "open":
            pytest.fail("import cycle: " + " → ".join(trail[trail.index(node):] + [node]))
        state[node] = "open"
        for nxt in sorted(graph.get(node, ())):
            visit(nxt, trail + [node])
        state[node] = "done"

    for module in sorted(graph):
        visit(module, [])


def test_the_package_map_lists_every_module_in_its_layer():
    """Each module under its layer's heading; a module of a room (course/aids/viz.py) under its room's."""
    sections = dict(re.findall(r"``(\w+)/``(.*?)(?=\n``\w+/``|\Z)", grpo_edu.__doc__, flags=re.S))
    for module, path in MODULES.items():
        layer, *inside = module.split(".")
        text = sections.get(layer, "")
        if not inside:
            continue
        if path.name == "__init__.py":                        # a room: course.aids
            assert f"``{inside[-1]}/``" in text, f"the package docstring's map misses the room {module}"
            continue
        if len(inside) == 2:                                  # course.aids.viz: listed in its room's lines
            text = dict(re.findall(r"``(\w+)/``(.*?)(?=\n\s+``\w+/``|\Z)", text, flags=re.S)).get(inside[0], "")
        assert f"``{inside[-1]}``" in text, f"the package docstring's map misses {module}"


def test_every_exported_name_lives_where_the_table_says():
    for name, module in grpo_edu._EXPORTS.items():
        assert module in MODULES, f"_EXPORTS[{name!r}] names {module!r}, which is no module"
        value = getattr(grpo_edu, name)
        defined_in = getattr(value, "__module__", None)
        if defined_in is not None and callable(value):
            assert defined_in == f"grpo_edu.{module}", f"{name} is defined in {defined_in}, not {module}"


LESSONS = sorted((PACKAGE.parent / "lessons").glob("*.ipynb"))


def _lesson_modules(notebook):
    """The grpo_edu modules a lesson's code imports from, as 'layer.module'."""
    modules = set()
    for cell in notebook["cells"]:
        if cell["cell_type"] != "code":
            continue
        code = "\n".join(line for line in "".join(cell["source"]).splitlines()
                         if not line.lstrip().startswith(("%", "!")))
        for node in ast.walk(ast.parse(code)):
            if not (isinstance(node, ast.ImportFrom) and (node.module or "").startswith("grpo_edu")):
                continue
            for alias in node.names:
                if node.module == "grpo_edu":
                    modules.add(grpo_edu._EXPORTS[alias.name])
                elif in_its_room(f"{node.module[len('grpo_edu.'):]}.{alias.name}") in MODULES:
                    modules.add(in_its_room(f"{node.module[len('grpo_edu.'):]}.{alias.name}"))
                else:
                    modules.add(in_its_room(node.module[len("grpo_edu."):]))
    return modules


@pytest.mark.parametrize("lesson", LESSONS, ids=lambda p: p.stem)
def test_each_lesson_opens_with_the_files_it_builds_on(lesson):
    import json

    notebook = json.loads(lesson.read_text(encoding="utf-8"))
    opening = "".join(next(c for c in notebook["cells"] if c["cell_type"] == "markdown")["source"])
    modules = _lesson_modules(notebook)
    assert modules, f"{lesson.name} imports nothing from grpo_edu"
    missing = [m for m in sorted(modules) if f"grpo_edu/{m.replace('.', '/')}.py" not in opening]
    assert not missing, f"{lesson.name}'s opening does not say where these live: {missing}"


@pytest.mark.parametrize("layer", sorted(ROOM_OF))
def test_the_paths_from_before_the_rooms_still_import(layer):
    """course/ and training/ sorted into rooms: a lesson's `from grpo_edu.course import viz`, an old dotted path
    (`grpo_edu.training.trainer`) and `python -m grpo_edu.course.claims` reach the room's module itself, never a
    second copy of it."""
    import importlib
    import subprocess
    import sys

    package = importlib.import_module(f"grpo_edu.{layer}")
    for name, room in ROOM_OF[layer].items():
        real = importlib.import_module(f"grpo_edu.{layer}.{room}.{name}")
        assert importlib.import_module(f"grpo_edu.{layer}.{name}") is real, name
        assert getattr(package, name) is real, name
        assert real.__spec__.name == real.__name__ == f"grpo_edu.{layer}.{room}.{name}"
    old = {"course": "grpo_edu.course.claims", "training": "grpo_edu.training.make_model"}[layer]
    run = subprocess.run([sys.executable, "-m", old, "--help"], capture_output=True, text=True)
    assert run.returncode == 0 and "--seed" in run.stdout, run.stderr
