"""PPO's critic: a value model V(s_t) for every completion token, as a separate small model.

GRPO needs no critic: the group's mean reward is its baseline. PPO as RLHF runs it (InstructGPT, verl's
``adv_estimator=gae``, TRL's ``PPOTrainer`` until TRL removed it in 2026) learns one. We make it the way verl and TRL did: a **second
model**, the policy's transformer body copied at the start, with a scalar head (hidden → 1) in place of the
language-model head. Why a second model and not a value head on the policy:

* it is the production form (verl's ``critic`` worker, TRL's former ``value_model``), so its cost is the cost a
  learner meets: a second set of weights, a second optimizer state, a second forward and backward pass
  per step. Measuring that cost is part of lesson 13 (the guide's "compute cost" row);
* the policy's loss and the value loss never share a gradient, so there is no ``vf_coef`` weighing one
  against the other, and the policy's update is exactly GRPO's update with other advantages.

V(s_t) is read where log π(o_t | q, o_<t) is read: at the position *before* completion token t (the state
the token is chosen in), as verl slices ``values[:, -T - 1:-1]``. The head starts at zero, so V = 0 at the
first step: GAE's Â then equals the reward-to-go, REINFORCE's, until the critic has learned something.
With a LoRA policy (``lora_rank``) the critic copies the policy with its adapter merged in and trains all of
its own weights: LoRA shrinks what the policy trains, not what the critic trains.

Shapes: N sequences, L = prompt + completion tokens, T completion tokens, H hidden size.
"""

import copy

import torch

from grpo_edu.common import _checks

HIDDEN_SIZE_FIELDS = ("hidden_size", "n_embd", "d_model")
"""Where a transformers config keeps the width of the hidden states (Llama/Qwen, GPT-2, T5-style)."""


def hidden_size_of(model):
    """The width H of ``model``'s hidden states, read from its config; refused when it cannot be read."""
    config = getattr(model, "config", None)
    for field in HIDDEN_SIZE_FIELDS:
        size = getattr(config, field, None)
        if isinstance(size, int) and not isinstance(size, bool) and size > 0:
            return size
    _checks.fail("model", f"{type(model).__name__}'s hidden size cannot be read (its config has none of "
                 f"{', '.join(HIDDEN_SIZE_FIELDS)} as a positive integer), so no value head can be put on it",
                 "pass a transformers causal LM whose config names its hidden size (config.hidden_size)")


class Critic(torch.nn.Module):
    """V(s_t): a copy of ``policy``'s transformer body and a zero-initialised linear head, hidden → 1."""

    def __init__(self, policy):
        super().__init__()
        hidden = hidden_size_of(policy)
        if callable(getattr(policy, "merge_and_unload", None)):    # a LoRA policy (peft): its body with the
            policy = copy.deepcopy(policy).merge_and_unload()       # adapter merged in, a plain model to copy
        body = getattr(policy, "base_model", None)
        if body is None or body is policy:
            _checks.fail("model", f"{type(policy).__name__} has no separate transformer body (base_model) to "
                         "copy for the critic", "pass a transformers causal LM (e.g. LlamaForCausalLM)")
        self.body = copy.deepcopy(body).train().requires_grad_(True)
        self.head = torch.nn.Linear(hidden, 1)
        torch.nn.init.zeros_(self.head.weight)                                   # V = 0 at the start
        torch.nn.init.zeros_(self.head.bias)

    def forward(self, input_ids, attention_mask, num_completion_tokens):
        """V(s_t) for the last ``num_completion_tokens`` tokens of each row, (N, T); see the module doc."""
        T = num_completion_tokens
        if bool(attention_mask[:, 0].all()):        # no left padding: the causal mask alone is exact
            attention_mask, position_ids = None, None
        else:
            position_ids = (attention_mask.long().cumsum(-1) - 1).clamp(min=0)  # as rollout.completion_logprobs
        hidden = self.body(input_ids=input_ids, attention_mask=attention_mask, position_ids=position_ids,
                           use_cache=False).last_hidden_state                    # (N, L, H)
        states = hidden[:, -T - 1:-1, :]                                         # the state before token t, (N, T, H)
        return self.head(states).squeeze(-1).float()                             # V(s_t), (N, T)
