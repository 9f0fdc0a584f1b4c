"""The course's own machinery, in four rooms (subpackages):

``aids/``         what the lessons show and check: figures (``viz``, ``viz_runs``), concept diagrams (``diagrams``), panels (``widgets``),
                  exercises and predictions (``exercises``, ``exercise_bank``, ``exercise_solutions``,
                  ``prediction_bank``), checked claims about a run (``claims``)
``experiments/``  the experiments the lessons run: ``forgetting``, ``replay_advice``, ``clinic``, ``variants``
``classroom/``    the instructor's and the room's tools: ``doctor``, ``answers``, ``copy_lessons``, ``site`` (with its ``site_font``)
``testing/``      the test run's tooling: its pytest plugins (``lesson_times``, ``kernel_start``), the browser
                  (``browser``) and the README's pictures (``screenshots``)

A lesson names a module without its room, ``from grpo_edu.course import viz``: :data:`ROOM_OF` says
where each lives and :func:`__getattr__` imports it on first use. The paths of before the rooms
(``grpo_edu.course.claims``, ``python -m grpo_edu.course.claims``, ``-p grpo_edu.course.lesson_times``)
reach the same module object through :class:`grpo_edu.common.rooms.RoomPaths`. Imports every layer below it; nothing imports
it but the ``grpo-edu`` command.
"""

from grpo_edu.common import rooms

ROOMS = {
    "aids": ("viz", "viz_runs", "diagrams", "widgets", "exercises", "exercise_bank", "exercise_solutions", "prediction_bank",
             "claims"),
    "experiments": ("forgetting", "replay_advice", "clinic", "variants", "family", "cost_of_a_step", "tools_runs",
                    "text_clinic", "overoptimisation", "process_rewards", "asynchronous"),
    "classroom": ("doctor", "answers", "copy_lessons", "site"),
    "testing": ("lesson_times", "kernel_start", "browser", "screenshots"),
}
ROOM_OF = {module: room for room, modules in ROOMS.items() for module in modules}
"""{module: its room}: ``viz`` lives in ``grpo_edu.course.aids.viz``."""


# ``from grpo_edu.course import viz``: the module from its room, imported on first use
__getattr__, __dir__ = rooms.install(__name__, ROOM_OF)
