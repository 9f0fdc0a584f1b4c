"""A reward model as a reward function: what lets GRPOTrainer optimise a learned reward.

TRL's ``GRPOTrainer(reward_funcs=…)`` takes a model as readily as a function: it tokenizes prompt and
completion together and reads the one logit. :class:`RewardModelReward` does the same behind our reward
functions' protocol, ``fn(prompts, completions, **columns)`` → N numbers, so it goes straight into
``GRPOTrainer(reward_funcs=[...])`` (``training.task.rewards.compute_rewards`` checks its output as any other).

Several models make an ensemble (Coste et al. 2023, "Reward Model Ensembles Help Mitigate Overoptimization"):
``combine="mean"`` averages their scores, ``"min"`` takes the most pessimistic (worst-case optimisation).
"""

import torch

from grpo_edu.common import _checks
from grpo_edu.training.reward_models.reward_model import check_reward_model, check_tokenizer_matches, score

COMBINE = ("mean", "min")


class RewardModelReward:
    """``reward(prompts, completions, **columns)`` → r_φ of each completion (one model, or an ensemble combined).

    ``models``: one reward model or a list; ``tokenizer``: theirs (shared); ``name``: the metric's name
    (``reward/<name>`` in the trainer's log)."""

    def __init__(self, models, tokenizer, *, combine="mean", name="reward_model"):
        self.models = list(models) if isinstance(models, (list, tuple)) else [models]
        if not self.models:
            _checks.fail("models", "is empty", "pass at least one reward model")
        for i, m in enumerate(self.models):
            check_reward_model(m, arg=f"models[{i}]")
            check_tokenizer_matches(m, tokenizer)          # another model's tokenizer: other words, or IndexError
            m.eval()
            m.requires_grad_(False)                      # the reward is fixed while the policy trains
        self.tokenizer = tokenizer
        self.combine = _checks.choice("combine", combine, COMBINE)
        self.__name__ = self.__qualname__ = name

    def __call__(self, prompts, completions, **kwargs):
        each = torch.stack([score(m, self.tokenizer, prompts, completions) for m in self.models])   # (M, N)
        combined = each.mean(0) if self.combine == "mean" else each.min(0).values                   # (N,)
        return combined.tolist()
