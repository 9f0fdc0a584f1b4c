"""The training loop and what it needs: the config, tasks, rollouts, rewards, the replay buffer,
the trainer that reads like the algorithm box, evaluation, checkpoints, run folders and the
bundled models. Imports ``core`` and ``common``."""
