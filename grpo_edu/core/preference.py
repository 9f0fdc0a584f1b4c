"""The reward model's loss: Bradley–Terry on preference pairs, with TRL's margin and centring terms.

A reward model r_φ(x, y) gives one number per (prompt, answer). Bradley and Terry (1952) model the
chance that a judge prefers y_c ("chosen") to y_r ("rejected") as σ(r_c − r_r), so fitting r_φ to
pairs is logistic regression on the difference of two scores:

    L_BT = −log σ( r_c − r_r − m )                      (Ouyang et al. 2022, eq. 1; m = 0)
         + λ_c · mean( (r_c + r_r)² )                   (Eisenstein et al. 2023, eq. 2; λ_c = 0 by default)

m is Llama 2's per-pair ``margin`` (Touvron et al. 2023, eq. 2): a pair labelled "much better" must be
won by at least m before its loss is small. λ_c, TRL's ``center_rewards_coefficient`` (recommended 0.01),
pulls the two scores' sum towards 0: BT sees only differences, so without it the scores may drift to any
offset, and a GRPO group's mean would hide the drift while a plain threshold would not.

Names follow TRL 1.16's ``RewardTrainer.compute_loss`` (``rewards_chosen``, ``rewards_rejected``,
``margin``, ``center_rewards_coefficient``) and its logged metrics ``accuracy`` (the share of pairs with
r_c > r_r) and ``margin`` (the mean of r_c − r_r). Shapes: P pairs, every tensor (P,).
"""

import torch
import torch.nn.functional as F

from grpo_edu.common import _checks


def _pair_tensor(arg, value, n=None):
    shape = tuple(getattr(value, "shape", ()))
    if not _checks.is_torch(value) or len(shape) != 1 or shape[0] < 1:
        _checks.fail(arg, f"must be a (P,) tensor of at least one pair, got {type(value).__name__} of shape {shape}",
                     "pass one score per pair, e.g. model(**chosen).logits.squeeze(-1)")
    if n is not None and shape[0] != n:
        _checks.fail(arg, f"has {shape[0]} entries but rewards_chosen has {n}", "pass one entry per pair")
    finite = torch.isfinite(value.detach())
    if not bool(finite.all()):                 # one NaN or ±inf score makes the whole loss NaN, silently
        first = int((~finite).nonzero()[0, 0])
        _checks.fail(arg, f"holds NaN or ±inf (first at pair {first}: {float(value[first])}), which would make the "
                     "loss NaN", "find where it comes from: a reward model whose weights diverged (lower the "
                     "learning rate) or were damaged, or a margin column with a bad value")
    return value


def bradley_terry_loss(rewards_chosen, rewards_rejected, *, margin=None, center_rewards_coefficient=None):
    """L_BT = mean −log σ(r_c − r_r − m) + λ_c · mean((r_c + r_r)²), over the P pairs.

    ``margin`` m: None, a number, or a (P,) tensor (TRL's dataset column ``margin``);
    ``center_rewards_coefficient`` λ_c: None (TRL's default: no term) or a number ≥ 0.

    Returns ``(loss, info)``; ``info`` as TRL's ``RewardTrainer`` logs it: ``accuracy`` (share with
    r_c > r_r), ``margin`` (mean r_c − r_r), ``min_reward``/``mean_reward``/``max_reward`` over all 2P
    scores; and ``bt_loss``, ``center_loss`` for the two terms.
    """
    _pair_tensor("rewards_chosen", rewards_chosen)
    P = rewards_chosen.shape[0]
    _pair_tensor("rewards_rejected", rewards_rejected, P)
    if center_rewards_coefficient is not None:
        _checks.positive_float("center_rewards_coefficient", center_rewards_coefficient, allow_zero=True,
                               fix="pass None (no centring) or a number ≥ 0; TRL recommends 0.01")
    if margin is not None and not _checks.is_torch(margin):
        margin = _checks.finite_float("margin", margin, fix="pass None, a number, or a (P,) tensor")
    elif margin is not None:
        _pair_tensor("margin", margin, P)
    difference = rewards_chosen - rewards_rejected                         # r_c − r_r, (P,)
    # −log σ(r_c − r_r − m): the chosen answer must win by the margin
    shifted = difference - margin if margin is not None else difference
    bt = -F.logsigmoid(shifted).mean()
    loss = bt
    center = torch.zeros(())
    if center_rewards_coefficient is not None:
        # λ_c · mean((r_c + r_r)²): keeps the scores' offset near 0 (BT alone cannot see it)
        center = torch.mean((rewards_chosen + rewards_rejected) ** 2)
        loss = bt + center_rewards_coefficient * center
    with torch.no_grad():
        both = torch.cat([rewards_chosen, rewards_rejected]).float()      # (2P,)
        info = {"accuracy": float((difference > 0).float().mean()), "margin": float(difference.mean()),
                "min_reward": float(both.min()), "mean_reward": float(both.mean()), "max_reward": float(both.max()),
                "bt_loss": float(bt), "center_loss": float(center)}
    return loss, info
