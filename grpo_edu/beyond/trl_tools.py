"""The tool settings in TRL's terms: a tool function, ``max_tool_calling_iterations``, and a ``rollout_func``.

TRL 1.16's ``GRPOTrainer`` runs tools in two ways. ``tools=[function]`` parses calls out of a *chat
template*'s tool-call format, which the course's character models do not have. ``rollout_func`` hands
the sampling to the caller: it returns ``prompt_ids``, ``completion_ids``, ``logprobs`` and, for a
multi-turn rollout, ``env_mask``, which TRL takes as its ``tool_mask`` (1 on the model's tokens, 0 on
the environment's) and multiplies into the loss mask. That is the route for a model without a chat
template: :func:`to_trl_tools` builds it on :func:`grpo_edu.training.rollouts.multi_turn.generate_with_tools`,
so TRL trains on exactly the ids, log-probs and masks our sampler makes. The tool function (typed, with
a Google-style docstring, as ``tools=[…]`` needs) comes too, for a model that has a chat template.
"""

from __future__ import annotations

from grpo_edu.common import _checks
from grpo_edu.training.rollouts.multi_turn import generate_with_tools
from grpo_edu.training.rollouts.tools import Tool


def trl_tool_function(tool):
    """``tool`` as a function TRL's ``tools=[…]`` can describe: typed, with a Google-style docstring."""
    def calculator(expression: str) -> str:
        """Evaluate a sum of whole numbers.

        Args:
            expression: Whole numbers joined by +, - or *, e.g. "12+345".

        Returns:
            The result after an equals sign, e.g. "=357".
        """
        return tool.function(expression)

    calculator.__name__ = tool.name
    return calculator


def to_trl_tools(tool, *, max_completion_length, temperature=1.0, seed=0):
    """``(kwargs, extras)``: ``kwargs`` for ``trl.GRPOConfig`` (``max_tool_calling_iterations``), and for
    ``trl.GRPOTrainer``, ``extras["rollout_func"]`` (our multi-turn sampler, returning ``env_mask``) and
    ``extras["tool_function"]`` (for ``tools=[…]`` with a chat-template model)."""
    if not isinstance(tool, Tool):
        _checks.fail("tool", f"is a {type(tool).__name__}, not a grpo_edu Tool", "pass Tool(function=…)")
    _checks.positive_int("max_completion_length", max_completion_length)
    import torch

    generator = torch.Generator().manual_seed(seed)

    def rollout_func(prompts, trainer):
        """One completion per prompt TRL hands over (its sampler already repeats each prompt G times)."""
        model, tokenizer = trainer.model, trainer.processing_class
        was_training = model.training
        model.eval()
        try:
            out = generate_with_tools(model, tokenizer, list(prompts), tool, num_generations=1,
                                      max_new_tokens=max_completion_length, temperature=temperature,
                                      generator=generator)
        finally:
            model.train(was_training)
        lengths = out.lengths.tolist()
        prompt_rows = [ids[mask.bool()].tolist() for ids, mask in zip(out.prompt_ids, out.prompt_mask)]
        return {"prompt_ids": prompt_rows,
                "completion_ids": [ids[:n].tolist() for ids, n in zip(out.completion_ids, lengths)],
                "logprobs": [lp[:n].tolist() for lp, n in zip(out.logprobs, lengths)],
                "env_mask": [m[:n].tolist() for m, n in zip(out.tool_mask, lengths)]}

    return ({"max_tool_calling_iterations": tool.max_calls},
            {"rollout_func": rollout_func, "tool_function": trl_tool_function(tool)})
