"""The training loop and what it needs, in six rooms (subpackages):

``model/``      loading a model, the bundled models' tokenizer and recipe, LoRA, PPO's critic
``rollouts/``   sampling answers with their log-probs (``rollout``, ``engine``), the training ``passes``, ``tools``
                and ``multi_turn`` rollouts
``task/``       the tasks (``tasks``, ``sums``, ``calc``, ``task_setup``), their ``rewards``, ``evaluation``
``trainers/``   ``config``, ``trainer`` (the algorithm box) with its ``run_state``, GRPO's ``family``, ``replay``
``runs/``       a run on disk: ``checkpoint``, ``run_folder``
``asynchronous/`` sampling and training apart: ``versions`` (published weights, tagged batches), ``lagged`` (a
                sampler k updates behind, one process), ``processes`` (the sampler in its own process)

``from grpo_edu.training import trainer`` finds a module in its room (:data:`ROOM_OF`); the paths from before the
rooms (``grpo_edu.training.trainer``, ``python -m grpo_edu.training.make_model``) reach the same module object.
Imports ``core`` and ``common``.
"""

from grpo_edu.common import rooms

ROOMS = {
    "model": ("models", "tokenizer", "make_model", "lora", "critic"),
    "rollouts": ("rollout", "engine", "passes", "tools", "multi_turn"),
    "task": ("tasks", "sums", "calc", "task_setup", "rewards", "evaluation"),
    "trainers": ("config", "trainer", "run_state", "family", "replay"),
    "runs": ("checkpoint", "run_folder"),
    "asynchronous": ("versions", "lagged", "processes"),
}
ROOM_OF = {module: room for room, modules in ROOMS.items() for module in modules}
"""{module: its room}: ``trainer`` lives in ``grpo_edu.training.trainers.trainer``."""


def __getattr__(name):
    """``from grpo_edu.training import trainer``: the module from its room, imported on first use."""
    return rooms.module_from_room(__name__, ROOM_OF, name)


def __dir__():
    return sorted(set(globals()) | set(ROOM_OF))


rooms.install(__name__, ROOM_OF)
