"""A layer sorted into rooms (subpackages) without breaking the paths from before the rooms.

``course/`` and ``training/`` each hold their modules in rooms a learner can name (``course/aids/viz.py``,
``training/rollouts/engine.py``). Code, lessons and learners' own notebooks written before the rooms say
``grpo_edu.training.engine`` or run ``python -m grpo_edu.training.make_model``; :class:`RoomPaths` sends each such
path to the room's module itself: the same module object (never a second copy, whose classes and state would
differ), and ``get_code`` lets ``python -m`` run it. A layer's ``__init__`` calls :func:`install` with its table.
"""

import importlib
import importlib.abc
import importlib.util
import sys


class RoomPaths(importlib.abc.MetaPathFinder, importlib.abc.Loader):
    """``PACKAGE.NAME`` → ``PACKAGE.ROOM.NAME`` for every NAME in ``room_of`` ({module: its room})."""

    def __init__(self, package, room_of):
        self.package = package
        self.room_of = room_of
        self._specs = {}

    def _real(self, fullname):
        prefix, _, name = fullname.rpartition(".")
        return f"{prefix}.{self.room_of[name]}.{name}" if prefix == self.package and name in self.room_of else None

    def find_spec(self, fullname, path=None, target=None):
        real = self._real(fullname)
        return importlib.util.spec_from_loader(fullname, self) if real else None

    def create_module(self, spec):
        module = importlib.import_module(self._real(spec.name))
        self._specs[module.__name__] = module.__spec__
        return module

    def exec_module(self, module):
        module.__spec__ = self._specs[module.__name__]      # importlib gave it the old path's spec: its own back

    def get_code(self, fullname):
        real = self._real(fullname)
        return importlib.util.find_spec(real).loader.get_code(real)


def install(package, room_of):
    """Add the finder for ``package`` once (a reload of the package adds no second one), and return the package's
    ``(__getattr__, __dir__)``: ``from PACKAGE import NAME`` finds the module in its room, imported on first use,
    and ``dir(PACKAGE)`` lists every module of every room."""
    if not any(isinstance(finder, RoomPaths) and finder.package == package for finder in sys.meta_path):
        sys.meta_path.append(RoomPaths(package, room_of))
    names = sys.modules[package].__dict__ if package in sys.modules else {}

    def __getattr__(name):
        return module_from_room(package, room_of, name)

    def __dir__():
        return sorted(set(names) | set(room_of))

    return __getattr__, __dir__


def module_from_room(package, room_of, name):
    """``from PACKAGE import NAME``: the module from its room, imported on first use (a package's ``__getattr__``)."""
    if name not in room_of:
        raise AttributeError(f"module {package!r} has no attribute {name!r}")
    return importlib.import_module(f"{package}.{room_of[name]}.{name}")
