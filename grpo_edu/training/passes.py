"""Training passes that skip padding: each answer is computed over its own length, not the batch's longest.

A step's rows hold answers of many lengths (lesson 11's: 22 tokens on average, 42 for the longest), but
``rollout.completion_logprobs`` on the whole batch computes every row to the longest prompt plus the
longest answer: on the sums workload about half the reference and policy passes' tokens are padding.
This module does what TRL's ``padding_free`` and verl's ``use_remove_padding`` do, in the plainest way:

1. sort the rows by answer length;
2. cut the sorted rows into groups, each computed by one forward pass trimmed to its own longest prompt
   and answer (a cut costs one more pass, so it is made only where the padding it saves is worth more:
   :func:`length_groups`);
3. put each row's log-probs back in its place, 0 after its answer's end.

The result has the shape, the row order and (up to float rounding) the numbers of one padded pass, and
the gradient flows through the gathering, so the loss of the trainer's micro-batch is unchanged:
``tests/test_passes.py`` checks the loss and every parameter gradient against the padded pass to 1e-6.
Shapes: N rows, P prompt slots (left-padded), T answer slots, each group g of n_g rows trimmed to
P_g + T_g.
"""

import torch

from grpo_edu.training.rollout import completion_logprobs

PASS_COST_TOKENS = 64
"""What one more forward pass costs, counted in tokens of work (the per-call overhead of the ``transformers``
forward and its backward, on the bundled models on one CPU thread, is a few ms: about 64 tokens' worth)."""


def length_groups(prompt_lengths, answer_lengths, pass_cost=PASS_COST_TOKENS):
    """The rows cut into groups of similar length: a list of row-index lists, shortest answers first.

    The rows are sorted by answer length; a group of n rows costs n · (its longest prompt + its longest
    answer) tokens plus ``pass_cost``. Rows of one answer length always go together, and the cuts between
    the D distinct lengths are chosen by dynamic programming to make the total cost least (D ≤ T + 1, so
    this is at most a few thousand additions).
    """
    order = sorted(range(len(answer_lengths)), key=lambda i: (answer_lengths[i], prompt_lengths[i]))
    runs = []                                            # the sorted rows, one run per answer length
    for i in order:
        if runs and answer_lengths[runs[-1][0]] == answer_lengths[i]:
            runs[-1].append(i)
        else:
            runs.append([i])
    # best[j]: the least cost of runs[:j]; start[j]: where the last group of that best split begins
    best, start = [0.0] + [float("inf")] * len(runs), [0] * (len(runs) + 1)
    for j in range(1, len(runs) + 1):
        rows, longest_prompt = 0, 0
        for i in range(j - 1, -1, -1):                   # the last group is runs[i:j]
            rows += len(runs[i])
            longest_prompt = max(longest_prompt, max(prompt_lengths[r] for r in runs[i]))
            cost = best[i] + rows * (longest_prompt + answer_lengths[runs[j - 1][0]]) + pass_cost
            if cost < best[j]:
                best[j], start[j] = cost, i
    groups, j = [], len(runs)
    while j > 0:
        groups.append([r for run in runs[start[j]:j] for r in run])
        j = start[j]
    return groups[::-1]


def answer_logprobs(model, prompt_ids, prompt_mask, completion_ids, completion_mask, *, temperature=1.0,
                    with_entropy=False, entropy_grad=False, pass_cost=PASS_COST_TOKENS):
    """``rollout.completion_logprobs`` of these rows, each computed over its own length.

    Takes the rows' four tensors (prompts (N, P) left-padded, answers (N, T)) and returns
    ``(logprobs, entropy)``, (N, T) each, 0 after each answer's end (``completion_mask``), in the rows'
    own order; ``entropy`` is None unless ``with_entropy``. Gradients flow as through one padded pass.
    """
    N, T = completion_ids.shape
    P = prompt_ids.shape[1]
    prompt_lengths, answer_lengths = prompt_mask.sum(1).tolist(), completion_mask.sum(1).tolist()
    logprob_parts, entropy_parts, order = [], [], []
    for rows in length_groups(prompt_lengths, answer_lengths, pass_cost):
        p = max(prompt_lengths[r] for r in rows)          # the group's longest prompt and answer
        t = max(1, max(answer_lengths[r] for r in rows))   # (an empty answer still takes one slot)
        index = torch.tensor(rows, device=prompt_ids.device)
        ids = torch.cat([prompt_ids[index, P - p:], completion_ids[index, :t]], dim=1)        # (n_g, p + t)
        mask = torch.cat([prompt_mask[index, P - p:], completion_mask[index, :t]], dim=1)     # (n_g, p + t)
        logprobs, entropy = completion_logprobs(model, ids, mask, t, temperature=temperature,
                                                with_entropy=with_entropy, entropy_grad=entropy_grad)
        logprob_parts.append(torch.nn.functional.pad(logprobs, (0, T - t)))                 # (n_g, T)
        if with_entropy:
            entropy_parts.append(torch.nn.functional.pad(entropy, (0, T - t)))
        order += rows
    back = torch.argsort(torch.tensor(order, device=prompt_ids.device))                     # sorted → own order
    keep = completion_mask.to(logprob_parts[0].dtype)                                        # (N, T)
    logprobs = torch.cat(logprob_parts)[back] * keep
    entropy = torch.cat(entropy_parts)[back] * keep if with_entropy else None
    return logprobs, entropy


def rollout_logprobs(model, rollout, rows=slice(None), **kwargs):
    """:func:`answer_logprobs` of a :class:`~grpo_edu.training.rollout.Rollout`'s ``rows`` (all by default)."""
    return answer_logprobs(model, rollout.prompt_ids[rows], rollout.prompt_mask[rows], rollout.completion_ids[rows],
                           rollout.completion_mask[rows], **kwargs)
