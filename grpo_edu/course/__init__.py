"""The course's own machinery, in four rooms (subpackages):

``aids/``         what the lessons show and check: figures (``viz``, ``viz_runs``), panels (``widgets``),
                  exercises and predictions (``exercises``, ``exercise_bank``, ``exercise_solutions``,
                  ``prediction_bank``), checked claims about a run (``claims``)
``experiments/``  the experiments the lessons run: ``forgetting``, ``replay_advice``, ``clinic``, ``variants``
``classroom/``    the instructor's and the room's tools: ``doctor``, ``answers``, ``copy_lessons``, ``site``
``testing/``      the test run's tooling: its pytest plugins (``lesson_times``, ``kernel_start``), the browser
                  (``browser``) and the README's pictures (``screenshots``)

A lesson names a module without its room, ``from grpo_edu.course import viz``: :data:`ROOM_OF` says
where each lives and :func:`__getattr__` imports it on first use. The paths of before the rooms
(``grpo_edu.course.claims``, ``python -m grpo_edu.course.claims``, ``-p grpo_edu.course.lesson_times``)
reach the same module object through :class:`_RoomPaths`. Imports every layer below it; nothing imports
it but the ``grpo-edu`` command.
"""

import importlib
import importlib.abc
import importlib.util
import sys

ROOMS = {
    "aids": ("viz", "viz_runs", "widgets", "exercises", "exercise_bank", "exercise_solutions", "prediction_bank",
             "claims"),
    "experiments": ("forgetting", "replay_advice", "clinic", "variants", "family", "cost_of_a_step", "tools_runs"),
    "classroom": ("doctor", "answers", "copy_lessons", "site"),
    "testing": ("lesson_times", "kernel_start", "browser", "screenshots"),
}
ROOM_OF = {module: room for room, modules in ROOMS.items() for module in modules}
"""{module: its room}: ``viz`` lives in ``grpo_edu.course.aids.viz``."""


def __getattr__(name):
    """``from grpo_edu.course import viz``: the module from its room, imported on first use."""
    if name not in ROOM_OF:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    return importlib.import_module(f"{__name__}.{ROOM_OF[name]}.{name}")


def __dir__():
    return sorted(set(globals()) | set(ROOM_OF))


class _RoomPaths(importlib.abc.MetaPathFinder, importlib.abc.Loader):
    """``grpo_edu.course.NAME`` → ``grpo_edu.course.ROOM.NAME``, the same module object (never a second copy,
    whose classes and state would differ); ``get_code`` lets ``python -m grpo_edu.course.NAME`` run it."""

    @staticmethod
    def _real(fullname):
        prefix, _, name = fullname.rpartition(".")
        return f"{prefix}.{ROOM_OF[name]}.{name}" if prefix == __name__ and name in ROOM_OF else None

    def find_spec(self, fullname, path=None, target=None):
        real = self._real(fullname)
        return importlib.util.spec_from_loader(fullname, self) if real else None

    def __init__(self):
        self._specs = {}

    def create_module(self, spec):
        module = importlib.import_module(self._real(spec.name))
        self._specs[module.__name__] = module.__spec__
        return module

    def exec_module(self, module):
        module.__spec__ = self._specs[module.__name__]      # importlib gave it the old path's spec: its own back

    def get_code(self, fullname):
        real = self._real(fullname)
        return importlib.util.find_spec(real).loader.get_code(real)


if not any(isinstance(finder, _RoomPaths) for finder in sys.meta_path):
    sys.meta_path.append(_RoomPaths())
