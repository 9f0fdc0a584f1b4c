"""The training loop and what it needs, in rooms (subpackages):

``model/``      loading a model, the bundled models' tokenizers (characters; BPE with a chat template) and recipe,
                LoRA, PPO's critic
``rollouts/``   sampling answers with their log-probs (``rollout``, ``engine`` with its ``static_cache`` and
                ``cuda_graphs``), the training ``passes``, ``tools`` and ``multi_turn`` rollouts
``task/``       the tasks (``tasks``, ``sums`` with its exact ``sums_steps`` labels, ``calc``, ``words``, ``task_setup``), their ``rewards``, ``evaluation``
``trainers/``   ``config``, ``trainer`` (the algorithm box) with its ``run_state``, GRPO's ``family``, ``replay``
``runs/``       a run on disk: ``checkpoint``, ``run_folder``
``text/``       real text (lesson 16): ``chat`` templates, the ``completion_mask``, answer ``extraction``, the
                ``format_reward``, decode-then-encode ``drift``
``reward_models/`` learned rewards: ``reward_model``, the ``gold`` judge, ``preference_data``, ``reward_trainer``,
                a reward model as a ``reward_function`` (lesson 17), ``monte_carlo_labels`` and a ``process_reward_model`` (17b)
``asynchronous/`` sampling and training apart: ``versions`` (published weights, tagged batches), ``lagged`` (a
                sampler k updates behind, one process), ``processes`` (the sampler in its own process)

``from grpo_edu.training import trainer`` finds a module in its room (:data:`ROOM_OF`); the paths from before the
rooms (``grpo_edu.training.trainer``, ``python -m grpo_edu.training.make_model``) reach the same module object.
Imports ``core`` and ``common``.
"""

from grpo_edu.common import rooms

ROOMS = {
    "model": ("models", "tokenizer", "chat_tokenizer", "make_model", "lora", "critic"),
    "rollouts": ("rollout", "engine", "static_cache", "cuda_graphs", "passes", "tools", "multi_turn"),
    "task": ("tasks", "sums", "sums_steps", "calc", "words", "task_setup", "rewards", "evaluation"),
    "trainers": ("config", "trainer", "run_state", "family", "replay"),
    "runs": ("checkpoint", "run_folder"),
    "text": ("chat", "completion_mask", "extraction", "format_reward", "drift"),
    "reward_models": ("reward_model", "gold", "preference_data", "reward_trainer", "reward_function",
                      "monte_carlo_labels", "process_reward_model"),
    "asynchronous": ("versions", "lagged", "processes"),
}
ROOM_OF = {module: room for room, modules in ROOMS.items() for module in modules}
"""{module: its room}: ``trainer`` lives in ``grpo_edu.training.trainers.trainer``."""


# ``from grpo_edu.training import trainer``: the module from its room, imported on first use
__getattr__, __dir__ = rooms.install(__name__, ROOM_OF)
